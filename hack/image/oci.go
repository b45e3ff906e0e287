package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// OCI media types and annotations (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annRefName    = "org.opencontainers.image.ref.name"
	// containerd, and docker load on it, name an imported image by this.
	annContainerdName = "io.containerd.image.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type imageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Variant      string    `json:"variant,omitempty"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

// layout is an OCI image layout being written.
type layout struct{ dir string }

func newLayout(dir string) (*layout, error) {
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	return &layout{dir: dir}, nil
}

func (l *layout) blobPath(digest string) string {
	return filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// putJSON stores v as a blob and returns its descriptor.
func (l *layout) putJSON(mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	d := descriptor{MediaType: mediaType, Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(b)), Size: int64(len(b))}
	if err := os.WriteFile(l.blobPath(d.Digest), b, 0o644); err != nil {
		return descriptor{}, fmt.Errorf("write blob: %w", err)
	}
	return d, nil
}

// putLayer writes the root filesystem as a blob and returns its descriptor
// and diff ID.
func (l *layout) putLayer(entries []entry, mtime time.Time) (descriptor, string, error) {
	tmp, err := os.CreateTemp(l.dir, "layer-")
	if err != nil {
		return descriptor{}, "", fmt.Errorf("layer: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(tmp, sum)}
	diffID, err := writeLayer(cw, entries, mtime)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("layer: %w", cerr)
	}
	if err != nil {
		return descriptor{}, "", err
	}
	d := descriptor{MediaType: mediaLayer, Digest: digestOf(sum), Size: cw.n}
	if err := os.Rename(tmp.Name(), l.blobPath(d.Digest)); err != nil {
		return descriptor{}, "", fmt.Errorf("layer: %w", err)
	}
	return d, diffID, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// addImage writes the layer, config and manifest of one platform's image
// and returns the manifest's descriptor.
func (l *layout) addImage(s Spec, p platform, bin string) (descriptor, error) {
	ca, err := hostCABundle()
	if err != nil {
		return descriptor{}, err
	}
	layer, diffID, err := l.putLayer(rootfs(s, bin, ca), s.Created)
	if err != nil {
		return descriptor{}, err
	}
	var cfg imageConfig
	cfg.Created, cfg.OS, cfg.Architecture, cfg.Variant = s.Created, p.OS, p.Architecture, p.Variant
	cfg.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Config.Entrypoint = []string{s.Entrypoint()}
	cfg.Config.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"SSL_CERT_FILE=/" + caPath,
	}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = s.Labels()
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{diffID}
	cfg.History = []history{{Created: s.Created, CreatedBy: "hack/image: " + s.Command + " " + s.Version + " for " + p.String()}}
	cd, err := l.putJSON(mediaConfig, cfg)
	if err != nil {
		return descriptor{}, err
	}
	md, err := l.putJSON(mediaManifest, manifest{
		SchemaVersion: 2, MediaType: mediaManifest, Config: cd, Layers: []descriptor{layer},
		Annotations: map[string]string{"org.opencontainers.image.created": s.Created.Format(time.RFC3339)},
	})
	if err != nil {
		return descriptor{}, err
	}
	md.Platform = &p
	return md, nil
}

// finish writes the multi-platform index as a blob, and index.json naming
// it ref, and the oci-layout marker.
func (l *layout) finish(ref string, manifests []descriptor) error {
	id, err := l.putJSON(mediaIndex, index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: manifests})
	if err != nil {
		return err
	}
	id.Annotations = map[string]string{annRefName: ref, annContainerdName: ref}
	top, err := json.MarshalIndent(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{id}}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode index.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "index.json"), append(top, '\n'), 0o644); err != nil {
		return fmt.Errorf("write index.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n"), 0o644); err != nil {
		return fmt.Errorf("write oci-layout: %w", err)
	}
	return nil
}

// archive writes the layout in dir as an OCI archive (a tar of the layout,
// files in a fixed order).
func archive(dir, out string) error {
	blobs, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	names := []string{"oci-layout", "index.json"}
	for _, b := range blobs {
		names = append(names, "blobs/sha256/"+b.Name())
	}
	slices.Sort(names[2:])
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	tw := tar.NewWriter(f)
	dirs := []entry{{name: "blobs/", mode: 0o755, dir: true}, {name: "blobs/sha256/", mode: 0o755, dir: true}}
	for _, d := range dirs {
		if err := writeEntry(tw, d, time.Unix(0, 0)); err != nil {
			_ = f.Close()
			return fmt.Errorf("archive: %w", err)
		}
	}
	for _, n := range names {
		e := entry{name: n, mode: 0o644, fromFile: filepath.Join(dir, filepath.FromSlash(n))}
		if err := writeEntry(tw, e, time.Unix(0, 0)); err != nil {
			_ = f.Close()
			return fmt.Errorf("archive %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return fmt.Errorf("archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const (
	chartDir     = "../../charts/inferpick"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// The image is built once, as `make image` builds it, and read back without
// Docker: the index names the chart's default image and holds both
// platforms, each config runs the binary as nonroot, and the amd64 binary
// taken out of its layer runs here and reports the chart's version.
func TestImage(t *testing.T) {
	version, err := chartAppVersion(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plats := []platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
	spec := Spec{Command: "inferpick", Version: version, Revision: testRevision,
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Platforms: plats}
	dir := filepath.Join(t.TempDir(), "inferpick")
	ref, err := Build(t.Context(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}

	if want := chartDefaultImage(t); ref != want {
		t.Errorf("image reference %q, want the chart's default image %q", ref, want)
	}
	img := openLayout(t, dir)
	if got := img.top.Manifests[0].Annotations[annRefName]; got != ref {
		t.Errorf("index.json names %q, want %q", got, ref)
	}
	var gotPlats []platform
	for _, m := range img.platforms.Manifests {
		gotPlats = append(gotPlats, *m.Platform)
	}
	if diff := cmp.Diff(plats, gotPlats); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}

	for _, m := range img.platforms.Manifests {
		t.Run(m.Platform.String(), func(t *testing.T) {
			var man manifest
			img.readJSON(t, m.Digest, &man)
			var cfg imageConfig
			img.readJSON(t, man.Config.Digest, &cfg)
			type runAs struct {
				User, OS, Arch string
				Entrypoint     []string
				Labels         map[string]string
			}
			want := runAs{User: "65532:65532", OS: "linux", Arch: m.Platform.Architecture,
				Entrypoint: []string{"/usr/local/bin/inferpick"},
				Labels: map[string]string{
					"org.opencontainers.image.title":    "inferpick",
					"org.opencontainers.image.source":   "https://github.com/inferpick/inferpick",
					"org.opencontainers.image.version":  version,
					"org.opencontainers.image.revision": testRevision,
					"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
				}}
			got := runAs{User: cfg.Config.User, OS: cfg.OS, Arch: cfg.Architecture, Entrypoint: cfg.Config.Entrypoint, Labels: cfg.Config.Labels}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("image config (-want +got):\n%s", diff)
			}
			if len(man.Layers) != 1 {
				t.Fatalf("%d layers, want 1", len(man.Layers))
			}
			files, diffID := img.readLayer(t, man.Layers[0].Digest)
			if diff := cmp.Diff([]string{diffID}, cfg.RootFS.DiffIDs); diff != "" {
				t.Errorf("diff IDs (-want +got):\n%s", diff)
			}
			checkRootFS(t, files)
			bin := files["usr/local/bin/inferpick"]
			checkStaticELF(t, bin.body, m.Platform.Architecture)
			if m.Platform.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
				path := filepath.Join(t.TempDir(), "inferpick")
				if err := os.WriteFile(path, bin.body, 0o755); err != nil {
					t.Fatal(err)
				}
				out, err := exec.CommandContext(t.Context(), path, "--version").CombinedOutput()
				if err != nil {
					t.Fatalf("inferpick --version: %v\n%s", err, out)
				}
				wantOut := fmt.Sprintf("inferpick %s (revision %s)\n", version, testRevision)
				if string(out) != wantOut {
					t.Errorf("inferpick --version printed %q, want %q", out, wantOut)
				}
			}
		})
	}

	if _, err := os.Stat(dir + ".tar"); err != nil {
		t.Errorf("no OCI archive: %v", err)
	}
}

// chartDefaultImage is the image the chart deploys when no value overrides it.
func chartDefaultImage(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct{ Repository, Tag, Digest string }
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if v.Image.Digest != "" {
		t.Fatalf("the chart pins digest %s by default", v.Image.Digest)
	}
	tag := v.Image.Tag
	if tag == "" {
		if tag, err = chartAppVersion(filepath.Join(chartDir, "Chart.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	return v.Image.Repository + ":" + tag
}

// readImage reads an OCI layout, checking every blob against its digest.
type readImage struct {
	dir       string
	top       index
	platforms index
}

func openLayout(t *testing.T, dir string) *readImage {
	t.Helper()
	img := &readImage{dir: dir}
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &img.top); err != nil {
		t.Fatal(err)
	}
	if len(img.top.Manifests) != 1 || img.top.Manifests[0].MediaType != mediaIndex {
		t.Fatalf("index.json should point at one image index: %s", raw)
	}
	img.readJSON(t, img.top.Manifests[0].Digest, &img.platforms)
	return img
}

func (img *readImage) blob(t *testing.T, digest string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); got != digest {
		t.Fatalf("blob %s has digest %s", digest, got)
	}
	return b
}

func (img *readImage) readJSON(t *testing.T, digest string, v any) {
	t.Helper()
	if err := json.Unmarshal(img.blob(t, digest), v); err != nil {
		t.Fatalf("blob %s: %v", digest, err)
	}
}

type file struct {
	hdr  *tar.Header
	body []byte
}

// readLayer returns the layer's files by name and its diff ID.
func (img *readImage) readLayer(t *testing.T, digest string) (map[string]file, string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(img.blob(t, digest)))
	if err != nil {
		t.Fatal(err)
	}
	diff := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, diff))
	files := map[string]file{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = file{hdr: hdr, body: body}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		t.Fatal(err)
	}
	return files, digestOf(diff)
}

func checkRootFS(t *testing.T, files map[string]file) {
	t.Helper()
	if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", files["etc/passwd"].body)
	}
	if !strings.Contains(string(files["etc/group"].body), "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", files["etc/group"].body)
	}
	if !bytes.Contains(files[caPath].body, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("/%s holds no certificate", caPath)
	}
	if f, ok := files["tmp/"]; !ok || f.hdr.Typeflag != tar.TypeDir || f.hdr.Mode != 0o1777 {
		t.Errorf("/tmp is missing or not a sticky world-writable directory")
	}
	for name := range files {
		if strings.HasPrefix(name, "bin/") {
			t.Errorf("the image has %s: it should have no shell", name)
		}
	}
	if f := files["usr/local/bin/inferpick"]; f.hdr == nil || f.hdr.Mode&0o111 == 0 {
		t.Fatalf("/usr/local/bin/inferpick is missing or not executable")
	}
}

// checkStaticELF fails unless body is a Linux executable for arch with no
// dynamic loader.
func checkStaticELF(t *testing.T, body []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		t.Errorf("binary is for %v, want %v", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary is dynamically linked")
		}
	}
}

package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"time"
)

// nonroot is the user and group the image runs as, the one distroless
// images name "nonroot".
const nonroot = 65532

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
	// Go's resolver reads it: hosts files first, then DNS.
	nsswitch = "hosts: files dns\n"
	caPath   = "etc/ssl/certs/ca-certificates.crt"
)

// caSources are where build hosts keep their CA bundle, first found wins;
// $SSL_CERT_FILE comes before them.
var caSources = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/cert.pem",                  // macOS, OpenBSD
}

func hostCABundle() ([]byte, error) {
	paths := caSources
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		paths = append([]string{f}, paths...)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
	}
	return nil, fmt.Errorf("no CA bundle found in %v", paths)
}

// entry is one file or directory of the root filesystem.
type entry struct {
	name     string
	mode     int64
	uid      int
	dir      bool
	body     []byte
	fromFile string // the body is this file's content
}

// rootfs lists the image's one layer, parents before children.
func rootfs(s Spec, bin string, ca []byte) []entry {
	return []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, body: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: caPath, mode: 0o644, body: ca},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: s.Entrypoint()[1:], mode: 0o755, fromFile: bin},
	}
}

// writeLayer writes the entries as a gzipped tar to w and returns the
// sha256 of the uncompressed tar (the layer's diff ID).
func writeLayer(w io.Writer, entries []entry, mtime time.Time) (string, error) {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return "", fmt.Errorf("gzip: %w", err)
	}
	diff := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(zw, diff))
	for _, e := range entries {
		if err := writeEntry(tw, e, mtime); err != nil {
			return "", fmt.Errorf("layer %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("layer: %w", err)
	}
	return digestOf(diff), nil
}

func writeEntry(tw *tar.Writer, e entry, mtime time.Time) error {
	hdr := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
	if e.dir {
		hdr.Typeflag = tar.TypeDir
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if e.fromFile == "" {
		hdr.Size = int64(len(e.body))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.body)
		return err
	}
	f, err := os.Open(e.fromFile)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

func digestOf(h hash.Hash) string { return fmt.Sprintf("sha256:%x", h.Sum(nil)) }

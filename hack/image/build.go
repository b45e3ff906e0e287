package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Image names and metadata shared by every image.
const (
	registryPrefix = "ghcr.io/inferpick/"
	sourceURL      = "https://github.com/inferpick/inferpick"
	versionPkg     = "github.com/inferpick/inferpick/cmd/internal/version"
	binDir         = "/usr/local/bin/"
)

// Spec is one image to build.
type Spec struct {
	Command   string // under ./cmd; also the binary's name in the image
	Version   string
	Revision  string
	Created   time.Time
	Platforms []platform
}

// Ref is the image's reference: ghcr.io/inferpick/<command>:<version>.
func (s Spec) Ref() string { return registryPrefix + s.Command + ":" + s.Version }

// Entrypoint is where the binary sits in the image.
func (s Spec) Entrypoint() string { return binDir + s.Command }

// Labels are the image's OCI annotations as config labels.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    s.Command,
		"org.opencontainers.image.source":   sourceURL,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.created":  s.Created.Format(time.RFC3339),
	}
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func (p platform) String() string { return p.OS + "/" + p.Architecture }

func parsePlatform(s string) (platform, error) {
	goos, arch, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || goos == "" || arch == "" {
		return platform{}, fmt.Errorf("platform %q: want os/arch", s)
	}
	p := platform{OS: goos, Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p, nil
}

// Build compiles the command for every platform and writes the image as an
// OCI layout in dir and an OCI archive in dir+".tar". It returns the
// image's reference.
func Build(ctx context.Context, s Spec, dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("clean %s: %w", dir, err)
	}
	lay, err := newLayout(dir)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "inferpick-image-")
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	var manifests []descriptor
	for _, p := range s.Platforms {
		bin := filepath.Join(work, p.OS+"-"+p.Architecture, s.Command)
		if err := compile(ctx, s, p, bin); err != nil {
			return "", err
		}
		m, err := lay.addImage(s, p, bin)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		manifests = append(manifests, m)
	}
	if err := lay.finish(s.Ref(), manifests); err != nil {
		return "", err
	}
	if err := archive(dir, dir+".tar"); err != nil {
		return "", err
	}
	return s.Ref(), nil
}

// buildTags are the picker's build tags (see the Makefile's BUILD_TAGS).
const buildTags = "vtprotobuf"

// compile builds a static, stripped binary of ./cmd/<command> for p.
func compile(ctx context.Context, s Spec, p platform, out string) error {
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Revision=%s", versionPkg, s.Version, versionPkg, s.Revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", buildTags, "-ldflags", ldflags, "-o", out, "./cmd/"+s.Command)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", s.Command, p, err, o)
	}
	return nil
}

// moduleRoot is the directory of the main module's go.mod, so the builder
// works from any directory inside the module (its test runs in hack/image).
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "."
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// chartAppVersion reads appVersion from a Chart.yaml.
func chartAppVersion(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("chart: %w", err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("chart %s: %w", path, err)
	}
	if c.AppVersion == "" {
		return "", fmt.Errorf("chart %s has no appVersion", path)
	}
	return c.AppVersion, nil
}

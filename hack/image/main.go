// Command image builds inferpick's container images with Go alone: no
// Docker, no registry. For each command it cross-compiles a static binary
// per platform, lays it out in a distroless-style root filesystem (nonroot
// user 65532, CA certificates of the build host, /tmp) and writes an OCI
// image layout and an OCI archive holding a multi-platform index, named
// with the reference the Helm chart uses by default.
//
//	go run ./hack/image --out bin/image --revision "$(git rev-parse HEAD)"
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		out       = flag.String("out", "bin/image", "Directory the layouts and archives are written to.")
		chart     = flag.String("chart", "charts/inferpick/Chart.yaml", "Chart whose appVersion is the images' version.")
		version   = flag.String("version", "", "Version of the images (default: the chart's appVersion).")
		revision  = flag.String("revision", "unknown", "Source revision recorded in the binaries and labels.")
		created   = flag.String("created", "", "Creation time, RFC 3339 (default: $SOURCE_DATE_EPOCH, else the Unix epoch).")
		platforms = flag.String("platforms", "linux/amd64,linux/arm64", "Comma-separated os/arch list.")
		commands  = flag.String("commands", "inferpick,vllm-sim", "Comma-separated commands under ./cmd to build images of.")
	)
	flag.Parse()
	if *version == "" {
		v, err := chartAppVersion(*chart)
		if err != nil {
			return err
		}
		*version = v
	}
	when, err := creationTime(*created)
	if err != nil {
		return err
	}
	var plats []platform
	for p := range strings.SplitSeq(*platforms, ",") {
		pl, err := parsePlatform(p)
		if err != nil {
			return err
		}
		plats = append(plats, pl)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for c := range strings.SplitSeq(*commands, ",") {
		spec := Spec{Command: c, Version: *version, Revision: *revision, Created: when, Platforms: plats}
		ref, err := Build(ctx, spec, filepath.Join(*out, c))
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		fmt.Printf("%s\t%s\t%s.tar\n", ref, filepath.Join(*out, c), filepath.Join(*out, c))
	}
	return nil
}

// creationTime reads --created, else SOURCE_DATE_EPOCH, else the epoch:
// the same sources give the same image.
func creationTime(flagValue string) (time.Time, error) {
	if flagValue != "" {
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--created: %w", err)
		}
		return t.UTC(), nil
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/inferpick/inferpick/test/bench/proc"
)

// goBench is one micro-benchmark's medians over -count runs, by unit
// ("ns/op", "B/op", "allocs/op", "MB/s", "B/block", ...).
type goBench struct {
	Pkg, Name string
	Median    map[string]float64
	Runs      int
}

// nsPerByte is ns/op per body byte, from MB/s; 0 when not reported.
func (g goBench) nsPerByte() float64 {
	if mb := g.Median["MB/s"]; mb > 0 {
		return 1e3 / mb
	}
	return 0
}

// benchSet is one `go test -bench` invocation.
type benchSet struct {
	pkg, pattern, benchtime string
}

func benchSets(quick bool) []benchSet {
	bt := "300ms"
	if quick {
		bt = "30x"
	}
	return []benchSet{
		{"./picker/openai", "^BenchmarkParseChat$", bt},
		{"./picker/prefix", "^Benchmark(Hashes|MatchInsert)$", bt},
		{"./picker/prefix", "^BenchmarkIndexMemory$", "1x"},
		{"./picker/policy", "^Benchmark(Pick|PickObjectives|Knows|KnowsThenPick)$", bt},
		{"./picker/registry", "^BenchmarkPublish$", bt},
		{"./picker/scrape", "^Benchmark", bt},
		{"./picker/extproc", "^Benchmark(Handle|HandleReplica|HandleKVEvents|Exchange)$", bt},
		{"./picker/kvindex", "^Benchmark(CatchUp|Lookup)$", bt},
		{"./picker/kvindex", "^BenchmarkEventIndexMemory$", "1x"},
	}
}

// goBenchmarks runs the micro-benchmarks and returns their medians.
func goBenchmarks(ctx context.Context, count int, quick bool) ([]goBench, error) {
	if quick {
		count = 1
	}
	var out []goBench
	for _, s := range benchSets(quick) {
		args := []string{"test", "-tags", proc.BuildTags, "-run", "^$", "-bench", s.pattern, "-benchmem",
			"-count", strconv.Itoa(count), "-benchtime", s.benchtime, s.pkg}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, buf.String())
		}
		out = append(out, parseBench(s.pkg, buf.Bytes())...)
	}
	return out, nil
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// parseBench reads `go test -bench` output into per-benchmark medians.
func parseBench(pkg string, b []byte) []goBench {
	type acc struct {
		runs   int
		values map[string][]float64
	}
	byName := map[string]*acc{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		a := byName[name]
		if a == nil {
			a = &acc{values: map[string][]float64{}}
			byName[name] = a
			order = append(order, name)
		}
		a.runs++
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				a.values[f[i+1]] = append(a.values[f[i+1]], v)
			}
		}
	}
	out := make([]goBench, 0, len(order))
	for _, name := range order {
		a := byName[name]
		g := goBench{Pkg: strings.TrimPrefix(pkg, "./"), Name: name, Runs: a.runs, Median: map[string]float64{}}
		for unit, vs := range a.values {
			g.Median[unit] = median(vs)
		}
		out = append(out, g)
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

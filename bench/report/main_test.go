package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterRatios: workload e's three pairs give their ratios, each with its
// own subject, and the etcd-mode row is held to its target of 0.9.
func TestClusterRatios(t *testing.T) {
	csv := `workload,pair,repeat,proxy,requests,non2xx,errors,seconds,rps,p50_ms,p99_ms,peak_rss_mib,mib_s,first_ms,other_load,kept
e,e/fenceproxy,1,fenceproxy-etcd,1,0,0,10,900,1,2,60,,,0.01,1
e,e/fenceproxy,1,fenceproxy,1,0,0,10,1000,1,2,50,,,0.01,1
e,e/fenceproxy,2,fenceproxy,1,0,0,10,2000,1,2,50,,,0.01,1
e,e/fenceproxy,2,fenceproxy-etcd,1,0,0,10,2000,1,2,60,,,0.01,1
e,e/fenceproxy,3,fenceproxy-etcd,1,0,0,10,100,1,2,60,,,0.01,0
e,e/fenceproxy,3,fenceproxy,1,0,0,10,1000,1,2,50,,,0.50,0
e,e/fenceproxy-etcd-owner,1,fenceproxy-etcd-forwarded,1,0,0,10,600,1,2,90,,,0.01,1
e,e/fenceproxy-etcd-owner,1,fenceproxy-etcd-owner,1,0,0,10,1000,1,2,90,,,0.01,1
e-raise,e-raise/etcd,1,fenceproxy-etcd,1,0,0,10,3000,1,2,60,,,0.01,1
e-raise,e-raise/etcd,1,etcd,1,0,0,10,2000,1,2,,,,0.01,1
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "runs.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := readRuns(filepath.Join(dir, "runs.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []run
	for _, r := range all {
		if r.kept {
			runs = append(runs, r)
		}
	}
	rows := summarize(runs)
	got := map[string]ratio{}
	for _, r := range computeRatios(runs, rows) {
		got[r.name] = r
	}
	for _, want := range []struct {
		prefix      string
		value       float64
		pairs       int
		target, met string
	}{
		{"(e) req/s fenceproxy etcd mode / Badger mode", 0.95, 2, ">= 0.9", "yes"}, // median of 0.9 and 1; the pair of repeat 3 was discarded
		{"(e) req/s forwarded / sent to the owner", 0.6, 1, "", "-"},
		{"(e) raises/s fenceproxy etcd mode / etcd puts/s", 1.5, 1, "", "-"},
	} {
		var r ratio
		for name, v := range got {
			if strings.HasPrefix(name, want.prefix) {
				r = v
			}
		}
		if r.name == "" {
			t.Errorf("no ratio %q among %v", want.prefix, got)
			continue
		}
		if math.Abs(r.value-want.value) > 1e-9 || r.pairs != want.pairs || target(r) != want.target || r.met() != want.met {
			t.Errorf("%s: %v over %d pairs, target %q, met %s; want %v over %d, %q, %s",
				r.name, r.value, r.pairs, target(r), r.met(), want.value, want.pairs, want.target, want.met)
		}
	}
	// The table has a row per proxy of each workload e.
	var md strings.Builder
	if err := writeMarkdown(&md, rows, computeRatios(runs, rows), nil); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"| e | fenceproxy-etcd | 2 | 1450 |", "| e | fenceproxy-etcd-forwarded | 1 | 600 |", "| e-raise | etcd | 1 | 2000 |"} {
		if !strings.Contains(md.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, md.String())
		}
	}
}

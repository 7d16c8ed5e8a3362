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
		{"(e) req/s forwarded / sent to the owner", 0.6, 1, ">= 0.45", "yes"},
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

// TestCPUPerRequest: the cpu_us column of runs.csv gives the table's CPU µs
// per request (median of the kept runs, empty for direct), the CPU ratios of
// workload a (fenceproxy-off / nginx from the runs of the same repeat), and
// the targets are held against req/s and CPU ratios alike.
func TestCPUPerRequest(t *testing.T) {
	csv := `workload,pair,repeat,proxy,requests,non2xx,errors,seconds,rps,p50_ms,p99_ms,peak_rss_mib,mib_s,first_ms,other_load,cpu_us,kept
a,direct,1,direct,1,0,0,10,30000,1,2,,,,0.01,,1
a,a/fenceproxy-off,1,fenceproxy,1,0,0,10,10000,1,2,50,,,0.01,50,1
a,a/fenceproxy-off,1,fenceproxy-off,1,0,0,10,11000,1,2,50,,,0.01,45,1
a,a/reverseproxy,1,fenceproxy,1,0,0,10,10000,1,2,50,,,0.01,50,1
a,a/reverseproxy,1,reverseproxy,1,0,0,10,5000,1,2,20,,,0.01,100,1
a,a/nginx,1,fenceproxy,1,0,0,10,10000,1,2,50,,,0.01,50,1
a,a/nginx,1,nginx,1,0,0,10,20000,1,2,10,,,0.01,40,1
a,a/haproxy,1,fenceproxy,1,0,0,10,10000,1,2,50,,,0.01,50,1
a,a/haproxy,1,haproxy,1,0,0,10,25000,1,2,10,,,0.01,25,1
a,a/fenceproxy,1,fenceproxy-s3,1,0,0,10,9500,1,2,50,,,0.01,55,1
a,a/fenceproxy,1,fenceproxy,1,0,0,10,10000,1,2,50,,,0.01,50,1
a,a/fenceproxy-s3-signed,1,fenceproxy-resign,1,0,0,10,8000,1,2,50,,,0.01,70,1
a,a/fenceproxy-s3-signed,1,fenceproxy-s3-signed,1,0,0,10,9000,1,2,50,,,0.01,56,1
a,a/fenceproxy-off,2,fenceproxy-off,1,0,0,10,12500,1,2,50,,,0.01,38,1
a,a/fenceproxy-off,2,fenceproxy,1,0,0,10,12000,1,2,50,,,0.01,44,1
a,a/nginx,2,nginx,1,0,0,10,1000,1,2,10,,,0.01,400,0
a,a/nginx,2,fenceproxy,1,0,0,10,12000,1,2,50,,,0.50,44,0
a,a/nginx,2,nginx,1,0,0,10,20000,1,2,10,,,0.01,40,1
a,a/nginx,2,fenceproxy,1,0,0,10,12000,1,2,50,,,0.01,44,1
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "runs.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := readRuns(filepath.Join(dir, "runs.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var runs, discarded []run
	for _, r := range all {
		if r.kept {
			runs = append(runs, r)
		} else {
			discarded = append(discarded, r)
		}
	}
	rows := summarize(runs)
	ratios := computeRatios(runs, rows)
	got := map[string]ratio{}
	for _, r := range ratios {
		got[r.name] = r
	}
	for _, want := range []struct {
		name        string
		value       float64
		pairs       int
		target, met string
	}{
		{"(a) CPU µs/request fenceproxy / nginx", (50.0/40 + 44.0/40) / 2, 2, "<= 1.2", "yes"}, // the discarded pair of repeat 2 not counted
		{"(a) CPU µs/request fenceproxy / HAProxy", 2, 1, "", "-"},
		{"(a) CPU µs/request fenceproxy / stock ReverseProxy", 0.5, 1, "", "-"},
		{"(a) CPU µs/request fenceproxy-off / nginx", (45.0/40 + 38.0/40) / 2, 2, "", "-"},
		{"(a) CPU µs/request fenceproxy S3 pass / S3 off", 1.1, 1, "", "-"},
		{"(a) CPU µs/request fenceproxy S3 gateway / S3 pass, signed PUTs", 70.0 / 56, 1, "", "-"},
		{"(a) req/s fenceproxy / stock ReverseProxy", 2, 1, ">= 2", "yes"},
		{"(a) req/s fenceproxy S3 gateway / S3 pass, signed PUTs (cost of verifying and re-signing)", 8000.0 / 9000, 1, ">= 0.9", "no"},
		{"(a) req/s fenceproxy / nginx", 0.55, 2, ">= 0.6 (stretch 0.8)", "no"},
	} {
		r, ok := got[want.name]
		if !ok {
			t.Errorf("no ratio %q", want.name)
			continue
		}
		if math.Abs(r.value-want.value) > 1e-9 || r.pairs != want.pairs || target(r) != want.target || r.met() != want.met {
			t.Errorf("%s: %v over %d pairs, target %q, met %s; want %v over %d, %q, %s",
				r.name, r.value, r.pairs, target(r), r.met(), want.value, want.pairs, want.target, want.met)
		}
	}
	if r := got["(a) CPU µs/request fenceproxy / nginx"]; r.low != 1.1 || r.high != 1.25 {
		t.Errorf("fenceproxy / nginx CPU range %v - %v, want 1.1 - 1.25", r.low, r.high)
	}
	var md, tc strings.Builder
	if err := writeMarkdown(&md, rows, ratios, discarded); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"| workload | proxy | runs | req/s (2xx) | CPU µs / request | p50 ms |",
		"| a | direct | 1 | 30000 |  | 1.00 |",
		"| a | fenceproxy | 7 | 10000 | 50.0 |",
		"| a | nginx | 2 | 20000 | 40.0 |",
		"| a | fenceproxy-off | 2 | 11750 | 41.5 |",
		"| (a) CPU µs/request fenceproxy / nginx | 1.18 x | 1.10 - 1.25 | 2 | <= 1.2 | yes |",
		"| (a) CPU µs/request fenceproxy-off / nginx | 1.04 x | 0.95 - 1.12 | 2 |  | - | runs of the same repeat, not back to back |",
	} {
		if !strings.Contains(md.String(), line) {
			t.Errorf("table.md lacks %q:\n%s", line, md.String())
		}
	}
	if err := writeCSV(&tc, rows, ratios); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"workload,proxy,runs,rps_2xx,cpu_us_per_req,p50_ms,", "a,fenceproxy,7,10000,50.0,"} {
		if !strings.Contains(tc.String(), line) {
			t.Errorf("table.csv lacks %q:\n%s", line, tc.String())
		}
	}
}

// Command report turns the runs.csv that bench/run writes into the results
// table (table.csv, table.md) and its plot (table.svg), in the same directory.
//
// Usage: report -dir bench/results/<run>
//
// Per workload and proxy the table gives the median over runs of req/s (2xx
// answers only), the proxy's CPU time per 2xx answer, p50 and p99 latency and
// upload MiB/s, and the largest peak RSS. A ratio compares fenceproxy (or
// another of its modes) with a baseline run back to back with it in the same
// repeat (a pair); the ratio reported is the median over the pairs. A few
// compare two baselines of the same repeat of one bench/run instead, each run
// in a pair of its own.
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// run is one row of runs.csv: one proxy under one workload load. Missing
// numbers are NaN.
type run struct {
	workload, pair, repeat, proxy   string
	requests, non2xx, errors        float64
	rps, p50, p99, rss, mibs, first float64
	cpu                             float64 // the proxy's CPU time (utime + stime) per 2xx answer, µs
	other                           float64 // largest share of a CPU used by other processes
	kept                            bool    // false: repeated because of that share, not counted
}

var (
	workloads = []string{"a", "b", "c", "d-fill", "d-first-get", "d-first-new", "d-first-old", "d-restart", "e", "e-raise"}
	proxies   = []string{"direct", "reverseproxy", "nginx", "haproxy", "fenceproxy-off", "fenceproxy", "fenceproxy-s3", "fenceproxy-s3-signed", "fenceproxy-resign",
		"fenceproxy-deep", "fenceproxy-prefixes",
		"fenceproxy-etcd", "fenceproxy-etcd-owner", "fenceproxy-etcd-forwarded", "etcd"}
	colors = map[string]string{
		"direct": "#9e9e9e", "reverseproxy": "#1f77b4", "nginx": "#2ca02c", "haproxy": "#9467bd",
		"fenceproxy-off": "#ffbb78", "fenceproxy": "#ff7f0e", "fenceproxy-s3": "#d62728", "fenceproxy-s3-signed": "#e377c2", "fenceproxy-resign": "#9467bd",
		"fenceproxy-deep": "#aec7e8", "fenceproxy-prefixes": "#98df8a",
		"fenceproxy-etcd": "#8c564b", "fenceproxy-etcd-owner": "#c49c94", "fenceproxy-etcd-forwarded": "#bcbd22", "etcd": "#17becf",
	}
)

func main() {
	dir := flag.String("dir", ".", "directory holding runs.csv; the outputs are written there")
	flag.Parse()
	all, err := readRuns(filepath.Join(*dir, "runs.csv"))
	if err != nil {
		log.Fatal(err)
	}
	// Runs that bench/run repeated because other processes took too much of
	// a CPU are listed but not counted.
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
	for name, write := range map[string]func(io.Writer) error{
		"table.csv": func(w io.Writer) error { return writeCSV(w, rows, ratios) },
		"table.md":  func(w io.Writer) error { return writeMarkdown(w, rows, ratios, discarded) },
		"table.svg": func(w io.Writer) error { return writeSVG(w, rows, ratios, caption(*dir)) },
	} {
		if err := writeFile(filepath.Join(*dir, name), write); err != nil {
			log.Fatal(err)
		}
	}
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}

func readRuns(path string) ([]run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("%s: no runs", path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, h := range []string{"workload", "pair", "repeat", "proxy", "requests", "non2xx", "errors", "rps", "p50_ms", "p99_ms", "peak_rss_mib", "mib_s", "first_ms", "other_load"} {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("%s: no column %q", path, h)
		}
	}
	// Optional columns: runs.csv files written before them lack them.
	num := func(rec []string, h string) float64 {
		i, ok := col[h]
		if !ok {
			return math.NaN()
		}
		v, err := strconv.ParseFloat(rec[i], 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	_, hasKept := col["kept"]
	var runs []run
	for _, rec := range recs[1:] {
		runs = append(runs, run{
			workload: rec[col["workload"]], pair: rec[col["pair"]], repeat: rec[col["repeat"]], proxy: rec[col["proxy"]],
			requests: num(rec, "requests"), non2xx: num(rec, "non2xx"), errors: num(rec, "errors"),
			rps: num(rec, "rps"), p50: num(rec, "p50_ms"), p99: num(rec, "p99_ms"),
			rss: num(rec, "peak_rss_mib"), mibs: num(rec, "mib_s"), first: num(rec, "first_ms"),
			cpu: num(rec, "cpu_us"), other: num(rec, "other_load"),
			kept: !hasKept || rec[col["kept"]] != "0",
		})
	}
	return runs, nil
}

// median of the values that are not NaN; NaN when there are none.
func median(vs []float64) float64 {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// maxOf the values that are not NaN; NaN when there are none.
func maxOf(vs []float64) float64 {
	m := math.NaN()
	for _, v := range vs {
		if !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}

func sum(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		if !math.IsNaN(v) {
			s += v
		}
	}
	return s
}

// row is one line of the results table.
type row struct {
	workload, proxy                 string
	runs                            int
	rps, p50, p99, mibs, rss, first float64
	cpu                             float64 // µs of the proxy's CPU per 2xx answer
	non2xx, errors                  float64
	other                           float64
}

func summarize(runs []run) []row {
	var rows []row
	for _, w := range workloads {
		for _, p := range proxies {
			var rps, cpu, p50, p99, mibs, rss, first, non2xx, errs, other []float64
			for _, r := range runs {
				if r.workload != w || r.proxy != p {
					continue
				}
				rps, cpu, p50, p99 = append(rps, r.rps), append(cpu, r.cpu), append(p50, r.p50), append(p99, r.p99)
				mibs, rss, first = append(mibs, r.mibs), append(rss, r.rss), append(first, r.first)
				non2xx, errs = append(non2xx, r.non2xx), append(errs, r.errors)
				other = append(other, r.other)
			}
			if len(rps) == 0 {
				continue
			}
			rows = append(rows, row{
				workload: w, proxy: p, runs: len(rps),
				rps: median(rps), cpu: median(cpu), p50: median(p50), p99: median(p99), mibs: median(mibs),
				rss: maxOf(rss), first: maxOf(first), non2xx: sum(non2xx), errors: sum(errs), other: median(other),
			})
		}
	}
	return rows
}

// ratio is one measure compared with the target.
type ratio struct {
	name, unit       string
	value, low, high float64 // median, and the range over the pairs
	pairs            int
	target           float64 // NaN: no target
	atMost           bool    // the target is an upper bound
	stretch          float64 // NaN: none
	isRatio          bool    // dimensionless; plotted in the ratio panel
	note             string
}

func (r ratio) met() string {
	switch {
	case math.IsNaN(r.target) || math.IsNaN(r.value):
		return "-"
	case r.atMost && r.value <= r.target, !r.atMost && r.value >= r.target:
		return "yes"
	default:
		return "no"
	}
}

// pairRatio is the median over repeats of f(subject's run) / f(baseline's
// run) in the pairs named pair.
func pairRatio(runs []run, pair, subject string, f func(run) float64) (med, low, high float64, n int) {
	byRepeat := map[string]map[string]run{}
	for _, r := range runs {
		if r.pair != pair {
			continue
		}
		if byRepeat[r.repeat] == nil {
			byRepeat[r.repeat] = map[string]run{}
		}
		byRepeat[r.repeat][r.proxy] = r
	}
	var vs []float64
	for _, m := range byRepeat {
		fp, okF := m[subject]
		if !okF || len(m) != 2 || math.IsNaN(f(fp)) {
			continue
		}
		for p, b := range m {
			if p != subject && f(b) > 0 {
				vs = append(vs, f(fp)/f(b))
			}
		}
	}
	if len(vs) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	return median(vs), slices.Min(vs), slices.Max(vs), len(vs)
}

// repeatRatio is the median over repeats of f(subject's run) / f(baseline's
// run) in workload w, where the two proxies ran in pairs of their own but in
// the same repeat of the same bench/run: minutes apart at most, not back to
// back. A proxy that ran more than once in a repeat counts with the median of
// its runs there.
func repeatRatio(runs []run, w, subject, baseline string, f func(run) float64) (med, low, high float64, n int) {
	byRepeat := map[string]map[string][]float64{}
	for _, r := range runs {
		if r.workload != w || (r.proxy != subject && r.proxy != baseline) {
			continue
		}
		if byRepeat[r.repeat] == nil {
			byRepeat[r.repeat] = map[string][]float64{}
		}
		byRepeat[r.repeat][r.proxy] = append(byRepeat[r.repeat][r.proxy], f(r))
	}
	var vs []float64
	for _, m := range byRepeat {
		s, b := median(m[subject]), median(m[baseline])
		if !math.IsNaN(s) && b > 0 {
			vs = append(vs, s/b)
		}
	}
	if len(vs) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	return median(vs), slices.Min(vs), slices.Max(vs), len(vs)
}

func computeRatios(runs []run, rows []row) []ratio {
	nan := math.NaN()
	rps := func(r run) float64 { return r.rps }
	p99 := func(r run) float64 { return r.p99 }
	cpu := func(r run) float64 { return r.cpu }
	// A baseline that ran near the rate of the sink without a proxy was held
	// back by the load generator and sink, not by itself: a ratio to it is
	// then an upper bound.
	direct := math.NaN()
	for _, r := range rows {
		if r.workload == "a" && r.proxy == "direct" {
			direct = r.rps
		}
	}
	pr := func(name, pair string, f func(run) float64, target float64, atMost bool, stretch float64) ratio {
		subject := "fenceproxy"
		switch pair {
		case "a/fenceproxy":
			subject = "fenceproxy-s3" // S3 pass mode against off mode
		case "a/fenceproxy-s3-signed":
			subject = "fenceproxy-resign" // S3 gateway mode against pass mode, the same signed PUTs
		case "a/fenceproxy-deep":
			subject = "fenceproxy-prefixes" // 10,000 prefix fences stored against none, keys six segments deep
		case "e/fenceproxy", "e-raise/etcd":
			subject = "fenceproxy-etcd" // cluster mode against the embedded store; its raises against etcd's Puts
		case "e/fenceproxy-etcd-owner":
			subject = "fenceproxy-etcd-forwarded" // sent to the replica that forwards, against sent to the owner
		}
		med, lo, hi, n := pairRatio(runs, pair, subject, f)
		r := ratio{name: name, unit: "x", value: med, low: lo, high: hi, pairs: n, target: target, atMost: atMost, stretch: stretch, isRatio: true}
		w, baseline, _ := strings.Cut(pair, "/")
		if w == "b" {
			w = "a" // b's baseline runs a's same-token load
		}
		for _, row := range rows {
			if strings.Contains(name, "req/s") && row.workload == w && row.proxy == baseline && row.rps >= 0.9*direct {
				r.note = fmt.Sprintf("%s ran at %.0f%% of the no-proxy rate: bound by the load side, so this is an upper bound", baseline, 100*row.rps/direct)
			}
		}
		return r
	}
	// sr: two proxies of the same repeat, each from a pair of its own.
	sr := func(name, w, subject, baseline string, f func(run) float64, target float64, atMost bool) ratio {
		med, lo, hi, n := repeatRatio(runs, w, subject, baseline, f)
		return ratio{name: name, unit: "x", value: med, low: lo, high: hi, pairs: n, target: target, atMost: atMost, stretch: nan, isRatio: true,
			note: "runs of the same repeat, not back to back"}
	}
	out := []ratio{
		pr("(a) req/s fenceproxy / fenceproxy-off (cost of fencing)", "a/fenceproxy-off", rps, 0.95, false, nan),
		pr("(a) req/s fenceproxy S3 pass / S3 off (cost of S3 mode)", "a/fenceproxy", rps, 0.95, false, nan),
		pr("(a) req/s fenceproxy S3 gateway / S3 pass, signed PUTs (cost of verifying and re-signing)", "a/fenceproxy-s3-signed", rps, 0.9, false, nan),
		pr("(a) req/s fenceproxy with 10,000 prefix fences / without, keys six segments deep", "a/fenceproxy-deep", rps, 0.95, false, nan),
		pr("(a) req/s fenceproxy / stock ReverseProxy", "a/reverseproxy", rps, 2.0, false, nan),
		pr("(a) req/s fenceproxy / nginx", "a/nginx", rps, 0.6, false, 0.8),
		pr("(a) req/s fenceproxy / HAProxy", "a/haproxy", rps, nan, false, nan),
		pr("(a) p99 fenceproxy / stock ReverseProxy", "a/reverseproxy", p99, 1.2, true, nan),
		pr("(a) CPU µs/request fenceproxy / nginx", "a/nginx", cpu, 1.2, true, nan),
		pr("(a) CPU µs/request fenceproxy / HAProxy", "a/haproxy", cpu, nan, true, nan),
		pr("(a) CPU µs/request fenceproxy / stock ReverseProxy", "a/reverseproxy", cpu, nan, true, nan),
		sr("(a) CPU µs/request fenceproxy-off / nginx", "a", "fenceproxy-off", "nginx", cpu, nan, true),
		pr("(a) CPU µs/request fenceproxy S3 pass / S3 off", "a/fenceproxy", cpu, nan, true, nan),
		pr("(a) CPU µs/request fenceproxy S3 gateway / S3 pass, signed PUTs", "a/fenceproxy-s3-signed", cpu, nan, true, nan),
		pr("(b) req/s fenceproxy rising / ReverseProxy same-token", "b/reverseproxy", rps, 0.5, false, nan),
		pr("(e) req/s fenceproxy etcd mode / Badger mode, same token, sent to the owner", "e/fenceproxy", rps, 0.9, false, nan),
		pr("(e) req/s forwarded / sent to the owner (cost of the hop)", "e/fenceproxy-etcd-owner", rps, 0.45, false, nan),
		pr("(e) raises/s fenceproxy etcd mode / etcd puts/s, same concurrency", "e-raise/etcd", rps, nan, false, nan),
	}
	out = slices.DeleteFunc(out, func(r ratio) bool { return r.pairs == 0 }) // workload not run
	find := func(w string) (row, bool) {
		for _, r := range rows {
			if r.workload == w && r.proxy == "fenceproxy" {
				return r, true
			}
		}
		return row{}, false
	}
	if r, ok := find("c"); ok {
		out = append(out, ratio{name: "(c) fenceproxy peak RSS, 1 streamed upload", unit: "MiB", value: r.rss, low: nan, high: nan, pairs: r.runs, target: 64, atMost: true, stretch: nan})
	}
	for _, r := range rows {
		if r.workload == "c" && r.proxy == "fenceproxy-resign" {
			out = append(out, ratio{name: "(c) fenceproxy S3 gateway peak RSS, 1 signed-stream upload", unit: "MiB", value: r.rss, low: nan, high: nan, pairs: r.runs, target: 64, atMost: true, stretch: nan})
		}
	}
	fill, okF := find("d-fill")
	restart, okR := find("d-restart")
	if okF || okR {
		rss := maxOf([]float64{fill.rss, restart.rss}) // a workload not run counts 0
		out = append(out, ratio{name: "(d) fenceproxy peak RSS, fill and restart", unit: "MiB", value: rss, low: nan, high: nan, pairs: 1, target: 300, atMost: true, stretch: nan})
	}
	for _, fa := range []struct{ workload, name string }{
		{"d-first-get", "(d) first answered GET after restart"},
		{"d-first-new", "(d) first answered write after restart, new resource"},
		{"d-first-old", "(d) first answered write after restart, resource written before, its own token"},
	} {
		if r, ok := find(fa.workload); ok {
			out = append(out, ratio{name: fa.name, unit: "ms", value: r.first, low: nan, high: nan, pairs: 1, target: 1000, atMost: true, stretch: nan})
		}
	}
	return out
}

// f formats v with prec decimals; "" for NaN.
func f(v float64, prec int) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func writeCSV(w io.Writer, rows []row, ratios []ratio) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"workload", "proxy", "runs", "rps_2xx", "cpu_us_per_req", "p50_ms", "p99_ms", "upload_mib_s", "peak_rss_mib", "first_answer_ms", "non2xx", "socket_errors", "other_load"})
	for _, r := range rows {
		_ = cw.Write([]string{r.workload, r.proxy, strconv.Itoa(r.runs), f(r.rps, 0), f(r.cpu, 1), f(r.p50, 2), f(r.p99, 2), f(r.mibs, 0), f(r.rss, 1), f(r.first, 0), f(r.non2xx, 0), f(r.errors, 0), f(r.other, 2)})
	}
	_ = cw.Write(nil)
	_ = cw.Write([]string{"measure", "unit", "median", "min", "max", "pairs", "target", "met", "note"})
	for _, r := range ratios {
		_ = cw.Write([]string{r.name, r.unit, f(r.value, 3), f(r.low, 3), f(r.high, 3), strconv.Itoa(r.pairs), target(r), r.met(), r.note})
	}
	cw.Flush()
	return cw.Error()
}

func target(r ratio) string {
	if math.IsNaN(r.target) {
		return ""
	}
	op := ">="
	if r.atMost {
		op = "<="
	}
	s := op + " " + strconv.FormatFloat(r.target, 'f', -1, 64)
	if !math.IsNaN(r.stretch) {
		s += " (stretch " + strconv.FormatFloat(r.stretch, 'f', -1, 64) + ")"
	}
	return s
}

func writeMarkdown(w io.Writer, rows []row, ratios []ratio, discarded []run) error {
	var b strings.Builder
	b.WriteString("| workload | proxy | runs | req/s (2xx) | CPU µs / request | p50 ms | p99 ms | upload MiB/s | peak RSS MiB | first answer ms | non-2xx | socket errors | other load |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.workload, r.proxy, r.runs,
			f(r.rps, 0), f(r.cpu, 1), f(r.p50, 2), f(r.p99, 2), f(r.mibs, 0), f(r.rss, 1), f(r.first, 0), f(r.non2xx, 0), f(r.errors, 0), f(r.other, 2))
	}
	b.WriteString("\n| measure | median | range over pairs | pairs | target | met | note |\n|---|--:|--:|--:|---|---|---|\n")
	for _, r := range ratios {
		rng := ""
		if !math.IsNaN(r.low) {
			rng = f(r.low, 2) + " - " + f(r.high, 2)
		}
		prec := 2
		if !r.isRatio {
			prec = 1
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %d | %s | %s | %s |\n", r.name, f(r.value, prec), r.unit, rng, r.pairs, target(r), r.met(), r.note)
	}
	if len(discarded) > 0 {
		fmt.Fprintf(&b, "\n%d run(s) not counted, repeated because other processes used more of a CPU than BENCH_MAX_OTHER_LOAD allows:", len(discarded))
		for _, r := range discarded {
			fmt.Fprintf(&b, " %s %s rep %s (%s);", r.workload, r.proxy, r.repeat, f(r.other, 2))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// caption is the plot's heading: the machine lines of machine.txt (written
// by bench/run) that say where and how the numbers were taken.
func caption(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "machine.txt"))
	if err != nil {
		return nil
	}
	keep := map[string]bool{"date": true, "cpu": true, "nproc": true, "go": true, "pinning": true, "load": true, "fenceproxy": true}
	var out []string
	var head []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || !keep[k] {
			continue
		}
		switch k {
		case "date", "cpu", "nproc", "go", "fenceproxy":
			head = append(head, k+" "+v)
		default:
			out = append(out, k+": "+v)
		}
	}
	return append([]string{"fenceproxy benchmark: " + strings.Join(head, ", ")}, out...)
}

// bar is one horizontal bar of a panel.
type bar struct {
	label, color string
	value        float64
	target       float64 // NaN: none; drawn as a tick
}

type panel struct {
	title, unit string
	bars        []bar
}

func writeSVG(w io.Writer, rows []row, ratios []ratio, caption []string) error {
	var panels []panel
	metric := func(title, unit string, ws []string, v func(row) float64) {
		p := panel{title: title, unit: unit}
		for _, r := range rows {
			if slices.Contains(ws, r.workload) && !math.IsNaN(v(r)) {
				p.bars = append(p.bars, bar{label: r.workload + "  " + r.proxy, color: colors[r.proxy], value: v(r), target: math.NaN()})
			}
		}
		if len(p.bars) > 0 {
			panels = append(panels, p)
		}
	}
	metric("req/s, 2xx answers only (median)", "req/s", []string{"a", "b", "e", "e-raise"}, func(r row) float64 { return r.rps })
	metric("CPU time of the proxy per 2xx answer (median)", "µs", []string{"a", "b", "e", "e-raise"}, func(r row) float64 { return r.cpu })
	metric("p99 latency (median)", "ms", []string{"a", "b", "e", "e-raise"}, func(r row) float64 { return r.p99 })
	metric("streamed upload throughput (median)", "MiB/s", []string{"c"}, func(r row) float64 { return r.mibs })
	metric("peak RSS of the proxy (largest)", "MiB", workloads, func(r row) float64 { return r.rss })
	rp := panel{title: "fenceproxy ratios (median of interleaved pairs); red tick = target", unit: "x"}
	for _, r := range ratios {
		if r.isRatio && !math.IsNaN(r.value) {
			label := r.name
			if t := target(r); t != "" {
				label += "  [" + t + "]"
			}
			rp.bars = append(rp.bars, bar{label: label, color: colors["fenceproxy"], value: r.value, target: r.target})
		}
	}
	if len(rp.bars) > 0 {
		panels = append(panels, rp)
	}

	const (
		width, labelW, barW, rowH, titleH, gap = 1060, 520, 440, 18, 26, 18
	)
	height := gap + titleH*len(caption)
	for _, p := range panels {
		height += titleH + len(p.bars)*rowH + gap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	y := gap
	for _, line := range caption {
		fmt.Fprintf(&b, `<text x="10" y="%d" fill="#444">%s</text>`+"\n", y+14, html.EscapeString(line))
		y += titleH
	}
	for _, p := range panels {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", y+16, html.EscapeString(p.title))
		y += titleH
		top := 0.0
		for _, br := range p.bars {
			top = math.Max(top, br.value)
			if !math.IsNaN(br.target) {
				top = math.Max(top, br.target)
			}
		}
		if top <= 0 {
			top = 1
		}
		for _, br := range p.bars {
			bw := float64(barW) * br.value / top
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, labelW-6, y+13, html.EscapeString(br.label))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, y+2, bw, rowH-4, br.color)
			if !math.IsNaN(br.target) {
				tx := float64(labelW) + float64(barW)*br.target/top
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#d62728" stroke-width="2"/>`, tx, tx, y, y+rowH)
			}
			// The white outline keeps the value legible over a target tick.
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" stroke="white" stroke-width="3" paint-order="stroke">%s %s</text>`, float64(labelW)+bw+4, y+13, short(br.value), p.unit)
			b.WriteString("\n")
			y += rowH
		}
		y += gap
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// short formats a bar's value with about three significant digits.
func short(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

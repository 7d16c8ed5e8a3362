// Command pool-worker is a worker of a fenceproxy shard pool: it claims
// shards of a pool with client.Pool (up to its fair share), writes to each
// shard's resource through the proxy with the shard's fencing token, hands
// shards back when a renew answer asks (a holder joined), and stops writing
// to a shard the moment its lease is lost. With -oneshot each shard is a
// task: the worker writes it, works on it for -task-time, writes its
// result, and marks it done; it exits 0 once no task is left.
//
// Every pool event is a JSON line on stderr: {"msg":"pool","kind":...,
// "shard":...,"token":...} with kind claimed, hand_back, released, done,
// lost or claim_failed ("error": a failed call; "work_error", on released:
// what the shard's work returned, e.g. a failed write); every write refused
// by the proxy as stale logs "fenced", every other failed write "write
// failed" with its status or error. Writes are PUT {proxy}/{lease name}
// with the body "holder=<holder> token=<token> seq=<n>" (one-shot:
// "... phase=start" and "... phase=result"); the lease name is the shard's,
// "{pool}/{shard}", or for a pool defined with a prefix the shard's prefix
// ("reports/daily/3/"), below which each write is a new key:
// {lease name}<holder>-<token>-<n>, never the same key twice (one-shot:
// {lease name}start and {lease name}result).
//
// Exit codes: 0 stopped by SIGINT/SIGTERM (shards released) or, one-shot,
// every task done; 1 error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

type worker struct {
	proxy, holder string
	interval      time.Duration
	taskTime      time.Duration
	oneShot       bool
	http          http.Client
	log           *slog.Logger
}

func main() {
	host, _ := os.Hostname()
	w := &worker{log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	control := flag.String("control", env("WORKER_CONTROL_URL", "http://localhost:9090"), "fenceproxy control URL [WORKER_CONTROL_URL]")
	flag.StringVar(&w.proxy, "proxy", env("WORKER_PROXY_URL", "http://localhost:8080"), "fenceproxy proxy URL [WORKER_PROXY_URL]")
	pool := flag.String("pool", env("WORKER_POOL", "demo"), "pool name [WORKER_POOL]")
	flag.StringVar(&w.holder, "holder", env("WORKER_HOLDER", fmt.Sprintf("%s-%d", host, os.Getpid())), "holder id [WORKER_HOLDER]")
	leaseToken := flag.String("lease-token", env("WORKER_LEASE_TOKEN", ""), "bearer for lease and pool calls [WORKER_LEASE_TOKEN]")
	ttl, _ := time.ParseDuration(env("WORKER_TTL", "10s"))
	flag.DurationVar(&ttl, "ttl", ttl, "shard lease TTL [WORKER_TTL]")
	flag.DurationVar(&w.interval, "interval", time.Second, "pause between writes to a shard")
	flag.BoolVar(&w.oneShot, "oneshot", false, "shards are one-shot tasks: mark each done after its work")
	flag.DurationVar(&w.taskTime, "task-time", time.Second, "one-shot: how long a task works between its start and its result")
	maxShards := flag.Int("max-shards", 0, "most shards held at once, 0 = the fair share")
	flag.Parse()
	if ttl < time.Millisecond || *pool == "" || w.holder == "" {
		fmt.Fprintln(os.Stderr, "pool-worker: need -pool, -holder and a -ttl of at least 1ms")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := &client.Pool{
		Leases: &client.Leases{BaseURL: *control, Bearer: *leaseToken},
		Name:   *pool, Holder: w.holder, TTL: ttl, OneShot: w.oneShot, MaxShards: *maxShards,
		Events: w.event,
	}
	work := w.continuous
	if w.oneShot {
		work = w.task
	}
	err := p.Run(ctx, work)
	if err != nil && !errors.Is(err, context.Canceled) {
		w.log.Error("pool-worker failed", "error", err.Error())
		os.Exit(1)
	}
	if err == nil && w.oneShot {
		w.log.Info("all done: every shard of the pool is done", "holder", w.holder, "pool", *pool)
	}
}

// event logs a pool event: "error" is a failed call (lost, a failed
// release or done), "work_error" what a released shard's work returned.
func (w *worker) event(ev client.PoolEvent) {
	attrs := []any{"kind", ev.Kind, "holder", w.holder, "shard", ev.Shard.Shard, "token", ev.Shard.Lease.Token}
	if ev.Err != nil {
		attrs = append(attrs, "error", ev.Err.Error())
	}
	if ev.WorkErr != nil {
		attrs = append(attrs, "work_error", ev.WorkErr.Error())
	}
	w.log.Info("pool", attrs...)
}

var errFenced = errors.New("fenced out: the proxy refused our token as stale")

// key is the resource a write to shard s goes to: the shard's lease name,
// or, when that is a prefix (a pool with a prefix: it ends in "/"), the key
// below it named by part.
func key(s client.Shard, part string) string {
	if strings.HasSuffix(s.Lease.Name, "/") {
		return s.Lease.Name + part
	}
	return s.Lease.Name
}

// write PUTs body to the shard's resource (key's, with part) with its
// token (and signature).
func (w *worker) write(ctx context.Context, s client.Shard, part, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimSuffix(w.proxy, "/")+"/"+key(s, part), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(client.DefaultHeader, strconv.FormatUint(s.Lease.Token, 10))
	if s.Lease.TokenSignature != "" {
		req.Header.Set(client.HeaderSignature, s.Lease.TokenSignature)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("write failed", "holder", w.holder, "shard", s.Shard, "token", s.Lease.Token, "error", err.Error())
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusConflict {
		w.log.Warn("fenced", "holder", w.holder, "shard", s.Shard, "token", s.Lease.Token)
		return errFenced
	}
	if resp.StatusCode/100 != 2 {
		w.log.Warn("write failed", "holder", w.holder, "shard", s.Shard, "token", s.Lease.Token, "status", resp.StatusCode)
		return fmt.Errorf("write: status %d", resp.StatusCode)
	}
	w.log.Info("wrote", "holder", w.holder, "shard", s.Shard, "token", s.Lease.Token, "key", key(s, part), "status", resp.StatusCode)
	return nil
}

// continuous writes to the shard every interval until ctx ends or the proxy
// fences the token out.
func (w *worker) continuous(ctx context.Context, s client.Shard) error {
	for seq := 1; ; seq++ {
		// Below a prefix, a key of its own for every write: holder, token, seq.
		part := fmt.Sprintf("%s-%d-%d", w.holder, s.Lease.Token, seq)
		err := w.write(ctx, s, part, fmt.Sprintf("holder=%s token=%d seq=%d", w.holder, s.Lease.Token, seq))
		if errors.Is(err, errFenced) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.interval):
		}
	}
}

// task is one one-shot task: a start write, the work, a result write.
// Returning nil marks it done.
func (w *worker) task(ctx context.Context, s client.Shard) error {
	if err := w.write(ctx, s, "start", fmt.Sprintf("holder=%s token=%d phase=start", w.holder, s.Lease.Token)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(w.taskTime):
	}
	return w.write(ctx, s, "result", fmt.Sprintf("holder=%s token=%d phase=result", w.holder, s.Lease.Token))
}

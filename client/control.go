package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// maxAnswer bounds how much of a control API answer is read (a full page of
// 10,000 fences with long keys fits).
const maxAnswer = 64 << 20

// Control makes an operator's calls on a fenceproxy control listener: read,
// list, raise and reset fences; read, list and force-release leases. It
// answers with the control API's wire types, as the API writes them. A
// refusal is an *APIError carrying the problem's status, title, detail and
// reason (decide by Reason: wire.ReasonNotFound, wire.ReasonUnauthorized,
// ...); a failure to reach the listener is the http.Client's error.
type Control struct {
	// BaseURL is the control listener's base URL, e.g. http://127.0.0.1:9090.
	BaseURL string
	// HTTP sends the calls; nil means http.DefaultClient. Its CheckRedirect
	// is not used: the calls follow no redirect (ErrRedirect).
	HTTP *http.Client
	// AdminBearer is FENCEPROXY_ADMIN_TOKEN, sent as "Authorization: Bearer
	// <it>" on the admin calls: ListFences, RaiseFence, ResetFence,
	// ListLeases and ForceRelease. "": none (the server answers 401).
	AdminBearer string
	// LeaseBearer is FENCEPROXY_LEASE_TOKEN, sent on GetLease when set.
	LeaseBearer string
}

// GetFence returns resource's fence: its durable maximum. A resource never
// raised above 0 is an *APIError 404 (reason not_found).
func (c *Control) GetFence(ctx context.Context, resource string) (wire.Fence, error) {
	var f wire.Fence
	_, err := c.do(ctx, http.MethodGet, c.keyURL("/v1/fences/", resource, nil), "", nil, &f)
	return f, err
}

// ListFences returns one page of fences in resource-key order: those whose
// key starts with prefix and sorts after after, at most limit (1 to 10,000;
// 0: the server's default, 1,000). A full page carries Next, the after of
// the next page. Admin call.
func (c *Control) ListFences(ctx context.Context, prefix, after string, limit int) (wire.FenceList, error) {
	var page wire.FenceList
	_, err := c.do(ctx, http.MethodGet, c.listURL("/v1/fences", prefix, after, limit), c.AdminBearer, nil, &page)
	return page, err
}

// RaiseFence raises resource's fence to max(current, token) durably, once
// no write with a smaller token is in flight, and returns the fence after
// it. token is at most 2^63-1 (an error before anything is sent). Past the
// server's drain timeout: an *APIError 503 (reason drain_timeout) whose
// detail says whether the raise took effect. Admin call.
func (c *Control) RaiseFence(ctx context.Context, resource string, token uint64) (wire.Fence, error) {
	if token > fence.MaxToken {
		return wire.Fence{}, fmt.Errorf("fenceproxy: token %d is above 2^63-1", token)
	}
	t := wire.Token(token)
	var f wire.Fence
	_, err := c.do(ctx, http.MethodPut, c.keyURL("/v1/fences/", resource, nil), c.AdminBearer, &wire.RaiseRequest{Token: &t}, &f)
	return f, err
}

// ResetFence removes resource's fence and lease record, so that smaller
// tokens are admitted again, and returns the fence removed (its maximum).
// confirm is sent as ?confirm= and must be the resource key again: the
// server refuses anything else (400). A resource without a fence is an
// *APIError 404. Admin call.
func (c *Control) ResetFence(ctx context.Context, resource, confirm string) (wire.Fence, error) {
	var f wire.Fence
	_, err := c.do(ctx, http.MethodDelete, c.keyURL("/v1/fences/", resource, url.Values{"confirm": {confirm}}), c.AdminBearer, nil, &f)
	return f, err
}

// GetLease returns the lease name with its state now. A lease never
// acquired is an *APIError 404 (reason not_found).
func (c *Control) GetLease(ctx context.Context, name string) (wire.Lease, error) {
	var l wire.Lease
	_, err := c.do(ctx, http.MethodGet, c.keyURL("/v1/leases/", name, nil), c.LeaseBearer, nil, &l)
	return l, err
}

// ListLeases returns one page of leases in name order, each with its state
// now, as ListFences pages fences. Admin call.
func (c *Control) ListLeases(ctx context.Context, prefix, after string, limit int) (wire.LeaseList, error) {
	var page wire.LeaseList
	_, err := c.do(ctx, http.MethodGet, c.listURL("/v1/leases", prefix, after, limit), c.AdminBearer, nil, &page)
	return page, err
}

// ForceRelease ends the lease name whoever holds it and returns it (state
// released); its token stays spent and the fence stays. A lease never
// acquired is an *APIError 404. Admin call.
func (c *Control) ForceRelease(ctx context.Context, name string) (wire.Lease, error) {
	var l wire.Lease
	_, err := c.do(ctx, http.MethodDelete, c.keyURL("/v1/leases/", name, url.Values{"force": {"true"}}), c.AdminBearer, nil, &l)
	return l, err
}

// keyURL is BaseURL, path and key's segments, each escaped, then query.
func (c *Control) keyURL(path, key string, query url.Values) string {
	u := strings.TrimRight(c.BaseURL, "/") + path + escapeKey(key)
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return u
}

// listURL is BaseURL and path with a listing's query.
func (c *Control) listURL(path, prefix, after string, limit int) string {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Control) do(ctx context.Context, method, url, bearer string, body, out any) (http.Header, error) {
	h, err := send(ctx, c.HTTP, method, url, bearer, body, out)
	var apiErr *APIError
	if err != nil && !errors.As(err, &apiErr) {
		return nil, fmt.Errorf("fenceproxy: %s %s: %w", method, url, err)
	}
	return h, err
}

// ErrNotControlListener: the address answered, but not as fenceproxy's
// control API (every answer of which carries wire.HeaderListener): most
// often the proxy listener, which forwards to the backend.
var ErrNotControlListener = errors.New("not a fenceproxy control listener")

// controlBases are the base URLs that answered as the control API.
var controlBases sync.Map

// apiBase returns url's part before its API path ("/v1/..." or a listener
// path such as "/healthz"): the base URL a caller configured.
func apiBase(url string) string {
	for _, p := range []string{"/v1/", "/healthz"} {
		if i := strings.Index(url, p); i >= 0 {
			return url[:i]
		}
	}
	return url
}

// ErrRedirect: the address answered with a redirect (3xx). Control API
// answers never redirect, so a redirect is refused, not followed: no
// credential goes where it points (net/http would resend the bearer on a
// redirect to the same host). Errors that wrap it wrap
// ErrNotControlListener too.
var ErrRedirect = errors.New("redirect refused: fenceproxy's control API never redirects")

// checkControl makes sure url's base is the control API before a bearer
// token is sent to it: GET {base}/healthz, once per base and process,
// must carry wire.HeaderListener and not be a redirect (hc must follow
// none: noRedirects). Errors: ErrNotControlListener (wrapped, with what
// answered; ErrRedirect too for a 3xx), or the transport's.
func checkControl(ctx context.Context, hc *http.Client, url string) error {
	base := apiBase(url)
	if _, ok := controlBases.Load(base); ok {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if !fromControl(resp) {
		return notControl(base+"/healthz", resp)
	}
	controlBases.Store(base, struct{}{})
	return nil
}

// fromControl reports whether resp is an answer of the control API: not a
// redirect, and marked with wire.HeaderListener.
func fromControl(resp *http.Response) bool {
	return resp.StatusCode/100 != 3 && resp.Header.Get(wire.HeaderListener) == wire.ListenerControl
}

// noRedirects returns a copy of hc (nil: http.DefaultClient) that follows
// no redirect: a 3xx is returned as the answer, for fromControl to refuse.
func noRedirects(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// notControl is the error for an answer that is not the control API's
// (fromControl): what answered, and where the control API is.
func notControl(url string, resp *http.Response) error {
	if resp.StatusCode/100 == 3 {
		return fmt.Errorf("%w: %w: %s answered %s to %q, not followed; no credential was sent there. "+
			"Point the client at the control listener (FENCEPROXY_CONTROL_LISTEN, :9090 by default) itself",
			ErrNotControlListener, ErrRedirect, url, resp.Status, resp.Header.Get("Location"))
	}
	what := "an answer " + resp.Status
	if v := resp.Header.Get(wire.HeaderRefused); v != "" {
		what += " refused by a fenceproxy proxy listener (" + wire.HeaderRefused + ": " + v + ")"
	}
	return fmt.Errorf("%w: %s gave %s without the %s header; the proxy listener (FENCEPROXY_LISTEN, :8080 by default) "+
		"forwards to the backend, the control API is on FENCEPROXY_CONTROL_LISTEN (127.0.0.1:9090 by default); no credential was sent there",
		ErrNotControlListener, apiBase(url), what, wire.HeaderListener)
}

// escapeKey percent-encodes each segment of a resource key or lease name,
// keeping its slashes: the server decodes the path back to the same key.
func escapeKey(key string) string { return wire.EscapeName(key) }

// send makes one control API call with body as JSON (nil: none) and
// decodes a 2xx answer's JSON into out. Any other answer is an *APIError
// from its problem body (or its status alone), but a redirect, which is
// not followed, and an answer without wire.HeaderListener are
// ErrNotControlListener (notControl). It returns the answer's headers;
// other errors (transport, reading, decoding) are returned as they are,
// for the caller to name the call.
func send(ctx context.Context, hc *http.Client, method, url, bearer string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	hc = noRedirects(hc)
	if bearer != "" {
		// A bearer goes only to an address known to be the control API.
		if err := checkControl(ctx, hc, url); err != nil {
			return nil, err
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !fromControl(resp) {
		return nil, notControl(url, resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var pb wire.Problem
		_ = json.Unmarshal(data, &pb) // a body that is not a problem leaves the status to speak
		apiErr := &APIError{Status: resp.StatusCode, Title: pb.Title, Detail: pb.Detail, Reason: pb.Reason, problem: pb}
		if apiErr.Title == "" {
			apiErr.Title = http.StatusText(resp.StatusCode)
		}
		return resp.Header, apiErr
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	return resp.Header, nil
}

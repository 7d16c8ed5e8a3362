package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"

	"github.com/fenceproxy/fenceproxy/wire"
)

// maxBody bounds a request body in bytes (README: 64 KiB); it also bounds a
// pool definition's {"names": [...]}, whose list the README sizes by it.
const maxBody = 64 << 10

// route describes one control operation for handle.
type route struct {
	// op names the operation in logs, e.g. "lease.acquire".
	op string
	// prefix is the URL path before the name; name reads the resource key
	// or lease name from the raw path after it (fence.Resolver's Name or
	// LeaseName). name nil: the route names nothing.
	prefix string
	name   func(raw string) (string, error)
	// owner maps the resolved name to the name Options.Owner routes by
	// (the pool calls: the pool's); nil: the name itself.
	owner func(name string) string
	// badName is the table row of a name that name refuses (the resolver's
	// error is wrapped in it); nil: the resolver's error as is
	// (fence.ErrBadResource).
	badName error
	// badBody is the table row of a body that does not decode; nil for a
	// route without a body.
	badBody error
	// failed is the table row of an operation error that no row matches:
	// what failed when nothing else says (the route's store). nil: the
	// table's last row (an internal error).
	failed error
	// status is the status of a successful answer: 200 or 201.
	status int
}

// none is the body of a route that takes none: its body is not read.
type none struct{}

// request is what an operation gets.
type request[In any] struct {
	// Name is the resource key or lease name in the URL, resolved; "" for a
	// route that names none.
	Name string
	// Body is the decoded request body; zero for a route that takes none.
	Body In
	// Query is the URL's query.
	Query url.Values
	// Header holds the answer's headers. An operation sets them only when
	// it succeeds.
	Header http.Header
	// Remote is the client's address, for logs.
	Remote string
}

// handle returns the handler of one JSON route: it resolves the name after
// rt.prefix (bad: rt.badName), decodes the body strictly into In (bad:
// rt.badBody), runs op with the request's context, and answers op's Out as
// JSON with rt.status, or op's error as a problem: mapped once, by fail,
// through the table. A refused name or body runs nothing.
func handle[In, Out any](s *server, rt route, op func(ctx context.Context, req request[In]) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := request[In]{Query: r.URL.Query(), Header: w.Header(), Remote: r.RemoteAddr}
		if rt.name != nil {
			name, err := rt.name(rawAfter(r, rt.prefix))
			if err != nil {
				s.fail(w, r, rt, "", wrap(rt.badName, err))
				return
			}
			req.Name = name
			if s.opts.Owner != nil {
				routed := name
				if rt.owner != nil {
					routed = rt.owner(name)
				}
				done, forward, err := s.opts.Owner(r, routed)
				switch {
				case err != nil:
					s.fail(w, r, rt, name, err)
					return
				case forward != nil:
					forward.ServeHTTP(w, r)
					return
				case done != nil:
					defer done()
				}
			}
		}
		if _, takesNone := any(req.Body).(none); !takesNone {
			if err := decode(w, r, &req.Body); err != nil {
				s.fail(w, r, rt, req.Name, wrap(rt.badBody, err))
				return
			}
		}
		out, err := op(r.Context(), req)
		if err != nil {
			s.fail(w, r, rt, req.Name, err)
			return
		}
		wire.WriteJSON(w, rt.status, out)
	}
}

// queryValue returns the value of the query parameter name and whether it
// is there. Given more than once it is an error (errBadQuery) that says so:
// letting the first value win would take ?confirm=R&confirm=x for a
// confirmation of R.
func queryValue(q url.Values, name string) (string, bool, error) {
	vs, ok := q[name]
	if len(vs) > 1 {
		return "", true, detailed(errBadQuery, fmt.Sprintf("?%s= is given %d times; give it once", name, len(vs)))
	}
	if !ok {
		return "", false, nil
	}
	return vs[0], true, nil
}

// decode reads r's body, at most maxBody bytes, as exactly one JSON object
// into v: anything else, unknown fields and data after the object are
// errors, which say what is wrong.
// jsonError words a decoding error for the caller, not in Go's terms: a
// value of the wrong JSON type names the field and the type it takes.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	want := "a JSON " + jsonKind(te.Type)
	if te.Field == "ttl" {
		want += ` holding a Go duration such as "30s" or "2m"`
	}
	return fmt.Errorf("field %q must be %s, not a JSON %s", te.Field, want, te.Value)
}

// jsonKind names the JSON type that decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "value"
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("the body is larger than %d bytes", maxBody)
	case err != nil:
		return fmt.Errorf("reading the body: %w", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return errors.New("the body must be one JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("body: data after the JSON object")
	}
	return nil
}

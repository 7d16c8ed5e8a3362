package control

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// specPath is the OpenAPI document, relative to this package.
const specPath = "../api/openapi.yaml"

// routeLeases and routeAdmin are fakes that only make Handler register the
// lease and admin routes; the walk never calls them. Every optional part of
// Options is set, so every route the control listener can serve is walked.
type routeLeases struct {
	Leases
	LeaseLister
}
type routeAdmin struct{ AdminFences }
type routePools struct{ Pools }

// TestRoutesMatchOpenAPI checks that the control router serves exactly the
// operations api/openapi.yaml documents for the control listener, no more and
// no fewer: chi's trailing "/*" stands for the spec's slash-carrying path
// parameter ({resource}, {name}, marked x-allow-slashes).
func TestRoutesMatchOpenAPI(t *testing.T) {
	doc := loadSpec(t)

	h := Handler(&fakeStore{}, slog.New(slog.DiscardHandler), Options{
		Leases: routeLeases{}, Pools: routePools{}, Admin: routeAdmin{}, Metrics: prometheus.NewRegistry(),
		AdminToken: "admin", LeaseToken: "lease",
	})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("control.Handler returned %T, not a chi router", h)
	}
	var served []string
	err := chi.Walk(routes, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+normalizeChi(pattern))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var documented []string
	for path, item := range doc.Paths.Map() {
		if !onControlListener(doc, item) {
			continue
		}
		norm, err := normalizeSpec(path, item)
		if err != nil {
			t.Errorf("spec path %s: %v", path, err)
			continue
		}
		for method := range item.Operations() {
			documented = append(documented, method+" "+norm)
		}
	}

	slices.Sort(served)
	slices.Sort(documented)
	served, documented = slices.Compact(served), slices.Compact(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("control router serves %s, which api/openapi.yaml does not document", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("api/openapi.yaml documents %s, which the control router does not serve", r)
		}
	}
	if len(served) == 0 || len(documented) == 0 {
		t.Fatalf("nothing to compare: served %v, documented %v", served, documented)
	}
	t.Logf("control routes (%d): %s", len(served), strings.Join(served, ", "))
}

// TestSpecSlashParameters checks the spec's own promise about resource keys:
// every path parameter that takes a key with slashes is marked
// x-allow-slashes, is the last segment (chi's "/*" can only be last), and says
// in its description that it may contain slashes.
func TestSpecSlashParameters(t *testing.T) {
	doc := loadSpec(t)
	seen := 0
	for path, item := range doc.Paths.Map() {
		for _, pr := range item.Parameters {
			p := pr.Value
			if p.In != openapi3.ParameterInPath || p.Extensions["x-allow-slashes"] != true {
				continue
			}
			seen++
			if !strings.HasSuffix(path, "{"+p.Name+"}") {
				t.Errorf("%s: slash-carrying parameter {%s} must end the path", path, p.Name)
			}
			if !strings.Contains(strings.ToLower(p.Description), "slash") {
				t.Errorf("%s: parameter {%s} must say in its description that it may contain slashes", path, p.Name)
			}
		}
	}
	if seen < 3 {
		t.Fatalf("found %d x-allow-slashes path parameters; want {resource} and {name} on the control listener and {resource} on the proxy listener", seen)
	}
}

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("load %s: %v", specPath, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specPath, err)
	}
	return doc
}

// onControlListener: the document's top-level server is the control
// listener; a path with servers of its own (the proxy listener's /{resource})
// is served elsewhere.
func onControlListener(doc *openapi3.T, item *openapi3.PathItem) bool {
	if len(item.Servers) == 0 {
		return true
	}
	for _, s := range item.Servers {
		for _, top := range doc.Servers {
			if s.URL == top.URL {
				return true
			}
		}
	}
	return false
}

var templateParam = regexp.MustCompile(`\{([^{}]+)\}`)

// normalizeSpec turns a spec path into a comparable pattern: a trailing
// x-allow-slashes parameter becomes "*" (chi's catch-all), any other
// parameter "{}".
func normalizeSpec(path string, item *openapi3.PathItem) (string, error) {
	slashy := map[string]bool{}
	for _, pr := range item.Parameters {
		if p := pr.Value; p.In == openapi3.ParameterInPath && p.Extensions["x-allow-slashes"] == true {
			slashy[p.Name] = true
		}
	}
	for _, op := range item.Operations() {
		for _, pr := range op.Parameters {
			if p := pr.Value; p.In == openapi3.ParameterInPath && p.Extensions["x-allow-slashes"] == true {
				slashy[p.Name] = true
			}
		}
	}
	var bad error
	out := templateParam.ReplaceAllStringFunc(path, func(m string) string {
		name := m[1 : len(m)-1]
		if slashy[name] {
			return "*"
		}
		return "{}"
	})
	if i := strings.IndexByte(out, '*'); i >= 0 && i != len(out)-1 {
		bad = errEarlyWildcard
	}
	return out, bad
}

var errEarlyWildcard = errors.New("a slash-carrying parameter must be the last part of the path")

// normalizeChi turns a chi pattern into the same form: "{id}" and
// "{id:regexp}" become "{}", a trailing "/*" stays.
func normalizeChi(pattern string) string {
	return templateParam.ReplaceAllString(pattern, "{}")
}

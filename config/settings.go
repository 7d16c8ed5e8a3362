package config

import (
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"
)

// Redacted stands for the value of a secret that is set.
const Redacted = "<redacted>"

// Setting is one variable of an effective configuration (Config.Settings).
type Setting struct {
	// Var is the variable's name, FENCEPROXY_ included.
	Var string
	// Value is the value in effect, written as the variable takes it
	// (durations such as 30s, lists comma-separated, sizes in IEC units);
	// Redacted for a secret that is set; "" for one left unset.
	Value string
	// Default is true when the environment does not set the variable, so
	// that Value is its default (or derived from other variables, as
	// ABANDON_GRACE and REPLICA_ID are).
	Default bool
	// Secret marks the variables whose values are secrets (tag secret).
	Secret bool
}

// Settings lists every variable of c in declaration order with the value in
// effect, secrets redacted, and whether environ (the one Parse read) sets
// it. A set variable whose value is empty counts as set.
func (c Config) Settings(environ map[string]string) []Setting {
	v := reflect.ValueOf(c)
	t := v.Type()
	var out []Setting
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
		s := Setting{Var: Prefix + name, Secret: sf.Tag.Get("secret") == "true"}
		_, set := environ[s.Var]
		s.Default = !set
		switch fv := v.Field(i); {
		case fv.IsZero() && !set && sf.Tag.Get("envDefault") == "":
			// Unset and without a default: "" (LEASE_REVOKE_AFTER's 0s
			// means half the TTL, not 0s).
		case s.Secret:
			if !fv.IsZero() {
				s.Value = Redacted
			}
		default:
			s.Value = formatValue(fv)
		}
		out = append(out, s)
	}
	return out
}

// formatValue writes a field's value as its variable takes it.
func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case *url.URL:
		if x == nil {
			return ""
		}
		return x.Redacted()
	case *time.Duration:
		if x == nil {
			return ""
		}
		return x.String()
	case []string:
		return strings.Join(x, ",")
	case fmt.Stringer: // durations, sizes, the log level
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

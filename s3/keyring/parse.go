package keyring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// The rules Parse applies.
const (
	// An access key id has 1 to 128 characters: ASCII letters, digits and
	// the URL-unreserved symbols - . _ ~ . AWS's own ids are [A-Z0-9]{16,128};
	// S3-compatible stores are freer (MinIO: 3 or more of anything but "="
	// and ",", R2: 32 hex digits). These ids are the proxy's own, so short
	// ones (worker1) are fine; the unreserved set is what every SDK sends
	// unchanged in a Credential= header and in a presigned URL's query, and
	// excludes the "/" and "," that would break the Credential= field.
	MinIDLen, MaxIDLen = 1, 128
	// A secret has 16 to 256 characters of printable ASCII without space
	// (0x21 to 0x7e): AWS's are 40, R2's 64, GCS HMAC's 40; these keys are
	// the proxy's own, so nothing needs short ones. Space, control and
	// non-ASCII bytes are refused: SDKs and shells trim or mangle them.
	MinSecretLen, MaxSecretLen = 16, 256
	// A prefix is any valid UTF-8 up to 1024 bytes (an S3 key's maximum).
	MaxPrefixLen = 1024
)

// Problem is one bad field of a credentials file.
type Problem struct {
	Field   string // where: keys[1].grants[0].access; "" for the file as a whole
	Message string // what is wrong; never holds a secret
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidationError lists every problem Parse found, in file order.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("s3 credentials: ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Parse reads a credentials file (YAML or JSON) and checks all of it:
// unknown and repeated fields, types, access key ids (unique; MinIDLen to
// MaxIDLen of [A-Za-z0-9-._~]), secrets (MinSecretLen to MaxSecretLen of
// printable ASCII without space), at least one grant per key, buckets (3
// to 63 bytes of a-z 0-9 . - _, up to 222 in dot-separated parts of at most
// 63 as GCS allows, a letter or digit first and last, no ".."; no wildcard:
// each bucket is granted by name), prefixes
// (MaxPrefixLen, UTF-8; absent or "" is the whole bucket, null is refused
// so that a forgotten value does not grant the whole bucket), access (read,
// write or readwrite). YAML is decoded with sigs.k8s.io/yaml's strict
// conversion (a repeated field is an error); unknown fields are found by
// walking the whole document, so that all of them are reported, each with
// its position. An explicit empty list (keys: []) is valid and denies
// everyone; an empty file or a missing keys field is an error, so that a
// file caught half-written never revokes every key. The error is a
// *ValidationError with every problem; no error holds a secret.
func Parse(data []byte) (*Keys, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &ValidationError{[]Problem{{"", "the file is empty (want keys: [...])"}}}
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &ValidationError{[]Problem{{"", syntaxMessage(err)}}}
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil { // cannot happen: j was just encoded
		return nil, &ValidationError{[]Problem{{"", "not YAML or JSON"}}}
	}
	var p parser
	keys := p.file(doc)
	if len(p.problems) > 0 {
		return nil, &ValidationError{p.problems}
	}
	return keys, nil
}

var (
	lineRe = regexp.MustCompile(`line (\d+)`)
	dupRe  = regexp.MustCompile(`key "([^"]*)" already set in map`)
)

// syntaxMessage tells what the YAML parser refused without its own words
// when they quote a value: goyaml's messages may hold a scalar (a secret
// under a wrong tag, a complex map key).
func syntaxMessage(err error) string {
	msg := err.Error()
	where := "not YAML or JSON"
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		where += " (line " + m[1] + ")"
	}
	if m := dupRe.FindStringSubmatch(msg); m != nil {
		if slices.Contains(fieldNames, m[1]) || m[1] == "keys" {
			return fmt.Sprintf("%s: field %q repeated", where, m[1])
		}
		return where + ": a mapping key repeated"
	}
	if strings.ContainsAny(msg, "`'\"{[") {
		return where + ": the parser's message is withheld, as it may quote a value"
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := lineRe.FindStringIndex(msg); m != nil && m[0] == 0 {
		msg = strings.TrimPrefix(msg[m[1]:], ": ")
	}
	return where + ": " + msg
}

var fieldNames = []string{"access_key_id", "secret_access_key", "grants", "bucket", "prefix", "access"}

type parser struct {
	problems []Problem
}

func (p *parser) bad(field, format string, args ...any) {
	p.problems = append(p.problems, Problem{field, fmt.Sprintf(format, args...)})
}

// kind names a decoded JSON value's type for an error, never its value.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "true or false"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return "something else"
}

// fields checks that obj has only the known fields, reporting the others
// under at.
func (p *parser) fields(at string, obj map[string]any, known ...string) {
	var unknown []string
	for name := range obj {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		p.bad(join(at, showName(name)), "unknown field (the fields here: %s)", strings.Join(known, ", "))
	}
}

// showName is an unknown field's name as an error shows it: only a short
// lower-case name (a misspelt field), as a broken file can put a value, a
// secret too, in a field name's place.
func showName(name string) string {
	ok := len(name) <= 24
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c == '_' || c == '-'
	}
	if !ok {
		return "(a name that is not short and lower-case, not shown)"
	}
	return name
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// str reads a required string field; ok false (reported) when missing or
// not a string.
func (p *parser) str(at string, obj map[string]any, name string) (string, bool) {
	v, present := obj[name]
	field := join(at, name)
	if !present {
		p.bad(field, "missing")
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		p.bad(field, "want a string, got %s (quote it)", kind(v))
	}
	return s, ok
}

func (p *parser) file(doc any) *Keys {
	root, ok := doc.(map[string]any)
	if !ok {
		p.bad("", "want a mapping with the field keys, got %s", kind(doc))
		return nil
	}
	p.fields("", root, "keys")
	v, present := root["keys"]
	if !present {
		p.bad("keys", "missing (want a list of keys, keys: [] refuses everyone)")
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		p.bad("keys", "want a list of keys, got %s (keys: [] refuses everyone)", kind(v))
		return nil
	}
	keys := &Keys{byID: make(map[string]entry, len(list))}
	first := map[string]int{}
	for i, item := range list {
		at := fmt.Sprintf("keys[%d]", i)
		obj, ok := item.(map[string]any)
		if !ok {
			p.bad(at, "want a mapping with access_key_id, secret_access_key and grants, got %s", kind(item))
			continue
		}
		p.fields(at, obj, "access_key_id", "secret_access_key", "grants")
		var e entry
		id, idOK := p.str(at, obj, "access_key_id")
		if idOK {
			if msg := checkID(id); msg != "" {
				p.bad(at+".access_key_id", "%s", msg)
				idOK = false
			} else if j, dup := first[id]; dup {
				p.bad(at+".access_key_id", "%q repeats keys[%d]'s", id, j)
				idOK = false
			} else {
				first[id] = i
			}
		}
		if secret, ok := p.str(at, obj, "secret_access_key"); ok {
			if msg := checkSecret(secret); msg != "" {
				p.bad(at+".secret_access_key", "%s", msg)
			}
			e.secret = secret
		}
		e.grants = p.grants(at, obj)
		if idOK {
			keys.byID[id] = e
		}
	}
	return keys
}

func (p *parser) grants(at string, obj map[string]any) []Grant {
	field := at + ".grants"
	v, present := obj["grants"]
	if !present {
		p.bad(field, "missing (a key needs at least one grant)")
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		p.bad(field, "want a list of grants, got %s", kind(v))
		return nil
	}
	if len(list) == 0 {
		p.bad(field, "empty (a key needs at least one grant, remove the key to refuse it)")
		return nil
	}
	grants := make([]Grant, 0, len(list))
	for i, item := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		obj, ok := item.(map[string]any)
		if !ok {
			p.bad(at, "want a mapping with bucket, prefix and access, got %s", kind(item))
			continue
		}
		p.fields(at, obj, "bucket", "prefix", "access")
		var g Grant
		if b, ok := p.str(at, obj, "bucket"); ok {
			if msg := checkBucket(b); msg != "" {
				p.bad(at+".bucket", "%q: %s", b, msg)
			}
			g.Bucket = b
		}
		if v, present := obj["prefix"]; present {
			switch s, ok := v.(string); {
			case v == nil:
				p.bad(at+".prefix", `null, no value (for the whole bucket leave prefix out or write prefix: "")`)
			case !ok:
				p.bad(at+".prefix", "want a string, got %s (quote it)", kind(v))
			case len(s) > MaxPrefixLen:
				p.bad(at+".prefix", "%d bytes, at most %d (an S3 key's maximum)", len(s), MaxPrefixLen)
			case !utf8.ValidString(s):
				p.bad(at+".prefix", "not valid UTF-8")
			default:
				g.Prefix = s
			}
		}
		if a, ok := p.str(at, obj, "access"); ok {
			switch a {
			case "read":
				g.Access = Read
			case "write":
				g.Access = Write
			case "readwrite":
				g.Access = ReadWrite
			default:
				p.bad(at+".access", "%q is not read, write or readwrite", a)
			}
		}
		grants = append(grants, g)
	}
	return grants
}

// checkID returns what is wrong with an access key id, "" if nothing.
func checkID(id string) string {
	if id == "" {
		return "empty"
	}
	if len(id) < MinIDLen || len(id) > MaxIDLen {
		return fmt.Sprintf("%q: %d characters, want %d to %d", id, len(id), MinIDLen, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return fmt.Sprintf("%q: byte %q (want letters, digits and - . _ ~)", id, c)
		}
	}
	return ""
}

// checkSecret returns what is wrong with a secret, "" if nothing; never the
// secret, nor its length or a byte of it.
func checkSecret(s string) string {
	if s == "" {
		return "empty"
	}
	if len(s) < MinSecretLen {
		return fmt.Sprintf("shorter than %d characters", MinSecretLen)
	}
	if len(s) > MaxSecretLen {
		return fmt.Sprintf("longer than %d characters", MaxSecretLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "holds a space, a control character or non-ASCII (want printable ASCII)"
		}
	}
	return ""
}

// checkBucket returns what is wrong with a bucket name, "" if nothing. The
// rule is the union of the stores' rules, minus what no store allows today:
// 3 to 63 bytes of lower-case letters, digits, '.', '-' and '_' (GCS), up to
// 222 bytes when dot-separated parts are at most 63 each (GCS), starting and
// ending with a letter or digit, no "..". No wildcard.
func checkBucket(b string) string {
	switch {
	case b == "*" || strings.Contains(b, "*"):
		return "no wildcards (grant each bucket by name)"
	case strings.Contains(b, "/"):
		return "a bucket name has no '/' (put the part of the key in prefix)"
	case len(b) < 3:
		return "a bucket name has at least 3 characters"
	case len(b) > 222 || len(b) > 63 && !strings.Contains(b, "."):
		return "a bucket name has at most 63 characters (222 in dot-separated parts of at most 63)"
	case strings.Contains(b, ".."):
		return "a bucket name has no \"..\""
	}
	for _, part := range strings.Split(b, ".") {
		if len(part) > 63 {
			return "a dot-separated part of a bucket name has at most 63 characters"
		}
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			return "bucket names are lower case"
		}
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Sprintf("byte %q (a bucket name has lower-case letters, digits, '.', '-' and '_')", c)
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return "a bucket name starts and ends with a letter or digit"
	}
	return ""
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

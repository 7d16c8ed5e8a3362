package keyring_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/s3/keyring"
)

// Every secret in these tests holds the marker, so that one check finds a
// secret (or a part of one longer than the marker) in any error or log.
const marker = "Sekr1t"

const sec = marker + "-0123456789abcdef" // valid: 23 printable characters

func mustParse(t *testing.T, src string) *keyring.Keys {
	t.Helper()
	k, err := keyring.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return k
}

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    string
		ids    []string
		grants map[string][]keyring.Grant
	}{
		{"the example of the docs", `
keys:
  - access_key_id: worker1
    secret_access_key: "` + sec + `"
    grants:
      - {bucket: reports, prefix: "jobs/", access: readwrite}   # access: read | write | readwrite
`, []string{"worker1"}, map[string][]keyring.Grant{"worker1": {{"reports", "jobs/", keyring.ReadWrite}}}},
		{"JSON", `{"keys": [{"access_key_id": "worker1", "secret_access_key": "` + sec + `",
  "grants": [{"bucket": "reports", "prefix": "jobs/", "access": "read"}, {"bucket": "logs", "access": "write"}]}]}`,
			[]string{"worker1"}, map[string][]keyring.Grant{"worker1": {{"reports", "jobs/", keyring.Read}, {"logs", "", keyring.Write}}}},
		{"an explicit empty list refuses everyone", "keys: []\n", nil, nil},
		{"prefix absent and empty are the whole bucket, block style, several keys", `
# worker keys
keys:
- access_key_id: AKIAIOSFODNN7EXAMPLE
  secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCY` + marker + `
  grants:
  - bucket: reports
    access: read
  - bucket: reports.archive.example.com
    prefix: ""
    access: write
- access_key_id: 0123456789abcdef0123456789abcdef
  secret_access_key: '` + sec + `''quote'
  grants:
  - {bucket: gcs_bucket-1, prefix: "a b/ü/", access: readwrite}
- access_key_id: minio.user-1_x~
  secret_access_key: "` + sec + `"
  grants: [{bucket: abc, access: read}]
`, []string{"0123456789abcdef0123456789abcdef", "AKIAIOSFODNN7EXAMPLE", "minio.user-1_x~"}, map[string][]keyring.Grant{
			"AKIAIOSFODNN7EXAMPLE":             {{"reports", "", keyring.Read}, {"reports.archive.example.com", "", keyring.Write}},
			"0123456789abcdef0123456789abcdef": {{"gcs_bucket-1", "a b/ü/", keyring.ReadWrite}},
			"minio.user-1_x~":                  {{"abc", "", keyring.Read}},
		}},
		{"a dotted GCS bucket of 222 bytes", `
keys:
- access_key_id: w1
  secret_access_key: ` + sec + `
  grants: [{bucket: ` + strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 30) + `, access: read}]
`, []string{"w1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := mustParse(t, tc.src)
			if got := k.IDs(); !slices.Equal(got, tc.ids) {
				t.Fatalf("IDs = %q, want %q", got, tc.ids)
			}
			if k.Len() != len(tc.ids) {
				t.Errorf("Len = %d, want %d", k.Len(), len(tc.ids))
			}
			for id, want := range tc.grants {
				if got := k.Grants(id); !slices.Equal(got, want) {
					t.Errorf("Grants(%s) = %+v, want %+v", id, got, want)
				}
				if s, ok := k.Secret(id); !ok || !strings.Contains(s, marker) && !strings.Contains(s, "EXAMPLE") {
					t.Errorf("Secret(%s) = %q, %v", id, s, ok)
				}
			}
		})
	}
}

func TestParseQuotedSecretKeepsItsBytes(t *testing.T) {
	k := mustParse(t, "keys:\n- access_key_id: w1\n  secret_access_key: '"+sec+"''x'\n  grants: [{bucket: abc, access: read}]\n")
	if s, _ := k.Secret("w1"); s != sec+"'x" {
		t.Fatalf("secret = %q, want %q", s, sec+"'x")
	}
}

// key builds one key of a file, with the secret and grants given as YAML.
func key(id, secret, grants string) string {
	return "- access_key_id: " + id + "\n  secret_access_key: " + secret + "\n  grants: " + grants + "\n"
}

const okGrants = "[{bucket: reports, prefix: jobs/, access: readwrite}]"

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // the problems, in order, each a prefix of its String
	}{
		{"empty file", "", []string{"the file is empty"}},
		{"blank file", " \n\t\n", []string{"the file is empty"}},
		{"only a comment", "# keys: []\n", []string{"want a mapping with the field keys, got null"}},
		{"a list", "- a\n", []string{"want a mapping with the field keys, got a list"}},
		{"a string", "keys\n", []string{"want a mapping with the field keys, got a string"}},
		{"keys missing", "key: []\n", []string{"key: unknown field", "keys: missing"}},
		{"keys null", "keys:\n", []string{"keys: want a list of keys, got null"}},
		{"keys a mapping", "keys: {a: b}\n", []string{"keys: want a list of keys, got a mapping"}},
		{"unknown top-level field", "version: 1\nkeys: []\n", []string{"version: unknown field (the fields here: keys"}},
		{"a key not a mapping", "keys: [worker1]\n", []string{"keys[0]: want a mapping with access_key_id, secret_access_key and grants, got a string"}},
		{"unknown key field", "keys:\n" + key("w1", sec, okGrants) + "  secret: " + sec + "\n",
			[]string{"keys[0].secret: unknown field (the fields here: access_key_id, secret_access_key, grants"}},
		{"a secret in a field name's place is not shown", "keys:\n" + key("w1", sec, okGrants) + "  " + marker + "Sekr1tSekr1t: x\n",
			[]string{"keys[0].(a name that is not short and lower-case, not shown): unknown field"}},
		{"id missing", "keys:\n- secret_access_key: " + sec + "\n  grants: " + okGrants + "\n", []string{"keys[0].access_key_id: missing"}},
		{"id a number", "keys:\n" + key("123456", sec, okGrants), []string{"keys[0].access_key_id: want a string, got a number (quote it)"}},
		{"id empty", "keys:\n" + key(`""`, sec, okGrants), []string{`keys[0].access_key_id: empty`}},
		{"id long", "keys:\n" + key(strings.Repeat("A", 129), sec, okGrants), []string{`keys[0].access_key_id: "AAAA`}},
		{"id with a space", "keys:\n" + key(`"work er"`, sec, okGrants), []string{`keys[0].access_key_id: "work er": byte ' ' (want letters, digits and - . _ ~)`}},
		{"id with a slash", "keys:\n" + key(`a/b/c`, sec, okGrants), []string{`keys[0].access_key_id: "a/b/c": byte '/'`}},
		{"id with =", "keys:\n" + key(`a=bc`, sec, okGrants), []string{`keys[0].access_key_id: "a=bc": byte '='`}},
		{"duplicate ids", "keys:\n" + key("w1", sec, okGrants) + key("w2", sec, okGrants) + key("w1", sec+"x", okGrants) + key("w2", sec, okGrants),
			[]string{`keys[2].access_key_id: "w1" repeats keys[0]'s`, `keys[3].access_key_id: "w2" repeats keys[1]'s`}},
		{"secret missing", "keys:\n- access_key_id: w1\n  grants: " + okGrants + "\n", []string{"keys[0].secret_access_key: missing"}},
		{"secret empty", "keys:\n" + key("w1", `""`, okGrants), []string{"keys[0].secret_access_key: empty"}},
		{"secret short", "keys:\n" + key("w1", marker+"123456789", okGrants), []string{"keys[0].secret_access_key: shorter than 16 characters"}},
		{"secret long", "keys:\n" + key("w1", strings.Repeat(marker, 43), okGrants), []string{"keys[0].secret_access_key: longer than 256 characters"}},
		{"secret with a space", "keys:\n" + key("w1", `"`+marker+` 0123456789abcdef"`, okGrants), []string{"keys[0].secret_access_key: holds a space, a control character or non-ASCII"}},
		{"secret with a tab", "keys:\n" + key("w1", `"`+marker+`\t0123456789abcdef"`, okGrants), []string{"keys[0].secret_access_key: holds a space"}},
		{"secret non-ASCII", "keys:\n" + key("w1", `"`+marker+`ü0123456789abcdef"`, okGrants), []string{"keys[0].secret_access_key: holds a space"}},
		{"secret a number", "keys:\n" + key("w1", "12345678901234567890", okGrants), []string{"keys[0].secret_access_key: want a string, got a number (quote it)"}},
		{"secret yes", "keys:\n" + key("w1", "yes", okGrants), []string{"keys[0].secret_access_key: want a string, got true or false"}},
		{"secret under a tag the parser refuses", "keys:\n" + key("w1", "!!int "+sec, okGrants),
			[]string{"not YAML or JSON: the parser's message is withheld, as it may quote a value"}},
		{"a field repeated", "keys:\n" + key("w1", sec, okGrants) + "  secret_access_key: " + sec + "\n",
			[]string{`not YAML or JSON (line 5): field "secret_access_key" repeated`}},
		{"a value repeated as a key", "keys:\n- " + marker + "aaaaaaaaaaaaa: 1\n  " + marker + "aaaaaaaaaaaaa: 2\n",
			[]string{"not YAML or JSON (line 3): a mapping key repeated"}},
		{"a syntax error", "keys:\n- access_key_id: w1\n  secret_access_key: " + marker + ": oops\n",
			[]string{"not YAML or JSON (line 3): mapping values are not allowed in this context"}},
		{"an unclosed quote", "keys:\n" + key("w1", `"`+sec, okGrants), []string{"not YAML or JSON (line 5)"}},
		{"a complex map key", "keys:\n- ? [" + sec + "]\n  : x\n", []string{"not YAML or JSON"}},
		{"grants missing", "keys:\n- access_key_id: w1\n  secret_access_key: " + sec + "\n", []string{"keys[0].grants: missing (a key needs at least one grant)"}},
		{"grants empty", "keys:\n" + key("w1", sec, "[]"), []string{"keys[0].grants: empty (a key needs at least one grant"}},
		{"grants null", "keys:\n" + key("w1", sec, ""), []string{"keys[0].grants: want a list of grants, got null"}},
		{"a grant not a mapping", "keys:\n" + key("w1", sec, "[reports]"), []string{"keys[0].grants[0]: want a mapping with bucket, prefix and access, got a string"}},
		{"unknown grant field", "keys:\n" + key("w1", sec, "[{bucket: reports, acess: read}]"),
			[]string{"keys[0].grants[0].acess: unknown field (the fields here: bucket, prefix, access", "keys[0].grants[0].access: missing"}},
		{"bucket missing", "keys:\n" + key("w1", sec, "[{access: read}]"), []string{"keys[0].grants[0].bucket: missing"}},
		{"bucket *", "keys:\n" + key("w1", sec, `[{bucket: "*", access: read}]`), []string{`keys[0].grants[0].bucket: "*": no wildcards (grant each bucket by name)`}},
		{"bucket with *", "keys:\n" + key("w1", sec, `[{bucket: "rep*", access: read}]`), []string{`keys[0].grants[0].bucket: "rep*": no wildcards`}},
		{"bucket with a key", "keys:\n" + key("w1", sec, `[{bucket: reports/jobs, access: read}]`), []string{`keys[0].grants[0].bucket: "reports/jobs": a bucket name has no '/' (put the part of the key in prefix)`}},
		{"bucket upper case", "keys:\n" + key("w1", sec, `[{bucket: Reports, access: read}]`), []string{`keys[0].grants[0].bucket: "Reports": bucket names are lower case`}},
		{"bucket short", "keys:\n" + key("w1", sec, `[{bucket: re, access: read}]`), []string{`keys[0].grants[0].bucket: "re": a bucket name has at least 3 characters`}},
		{"bucket empty", "keys:\n" + key("w1", sec, `[{bucket: "", access: read}]`), []string{`keys[0].grants[0].bucket: "": a bucket name has at least 3 characters`}},
		{"bucket long", "keys:\n" + key("w1", sec, `[{bucket: `+strings.Repeat("a", 64)+`, access: read}]`), []string{`keys[0].grants[0].bucket: "aaaa`}},
		{"bucket with a long part", "keys:\n" + key("w1", sec, `[{bucket: a.`+strings.Repeat("a", 64)+`, access: read}]`), []string{`keys[0].grants[0].bucket: "a.aaa`}},
		{"bucket hyphen first", "keys:\n" + key("w1", sec, `[{bucket: -abc, access: read}]`), []string{`keys[0].grants[0].bucket: "-abc": a bucket name starts and ends with a letter or digit`}},
		{"bucket ..", "keys:\n" + key("w1", sec, `[{bucket: a..b, access: read}]`), []string{`keys[0].grants[0].bucket: "a..b": a bucket name has no ".."`}},
		{"bucket $", "keys:\n" + key("w1", sec, `[{bucket: ab$c, access: read}]`), []string{`keys[0].grants[0].bucket: "ab$c": byte '$'`}},
		{"bucket a number", "keys:\n" + key("w1", sec, `[{bucket: 1234, access: read}]`), []string{`keys[0].grants[0].bucket: want a string, got a number (quote it)`}},
		{"prefix null", "keys:\n" + key("w1", sec, `[{bucket: reports, prefix: , access: read}]`),
			[]string{`keys[0].grants[0].prefix: null, no value (for the whole bucket leave prefix out or write prefix: "")`}},
		{"prefix a list", "keys:\n" + key("w1", sec, `[{bucket: reports, prefix: [a], access: read}]`), []string{`keys[0].grants[0].prefix: want a string, got a list`}},
		{"prefix long", "keys:\n" + key("w1", sec, `[{bucket: reports, prefix: `+strings.Repeat("p", 1025)+`, access: read}]`), []string{`keys[0].grants[0].prefix: 1025 bytes, at most 1024`}},
		{"access rw", "keys:\n" + key("w1", sec, `[{bucket: reports, access: rw}]`), []string{`keys[0].grants[0].access: "rw" is not read, write or readwrite`}},
		{"access READ", "keys:\n" + key("w1", sec, `[{bucket: reports, access: READ}]`), []string{`keys[0].grants[0].access: "READ" is not read, write or readwrite`}},
		{"access yes", "keys:\n" + key("w1", sec, `[{bucket: reports, access: yes}]`), []string{`keys[0].grants[0].access: want a string, got true or false`}},
		{"access missing", "keys:\n" + key("w1", sec, `[{bucket: reports}]`), []string{`keys[0].grants[0].access: missing`}},
		{"broken JSON", `{"keys": [}`, []string{"not YAML or JSON"}},
		{"JSON with a repeated field", `{"keys": [], "keys": []}`, []string{`not YAML or JSON (line 1): field "keys" repeated`}},
		{"JSON with a wrong type", `{"keys": [{"access_key_id": "w1", "secret_access_key": "` + sec + `", "grants": [{"bucket": "reports", "access": 1}]}]}`,
			[]string{"keys[0].grants[0].access: want a string, got a number"}},
		{"every problem of a file, in order", "keys:\n" +
			key("worker1", sec, okGrants) +
			key("worker2", `"short`+marker+`"`, `[{bucket: reports, access: readwrite}, {bucket: Bad_Bucket, prefix: x, access: rw}]`) +
			key("worker1", sec, "[]") +
			"- {access_key_id: \"\", grants: [{bucket: ok-bucket, access: read, extra: 1}]}\n",
			[]string{
				"keys[1].secret_access_key: shorter than 16 characters",
				`keys[1].grants[1].bucket: "Bad_Bucket": bucket names are lower case`,
				`keys[1].grants[1].access: "rw" is not read, write or readwrite`,
				`keys[2].access_key_id: "worker1" repeats keys[0]'s`,
				"keys[2].grants: empty",
				`keys[3].access_key_id: empty`,
				"keys[3].secret_access_key: missing",
				"keys[3].grants[0].extra: unknown field",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := keyring.Parse([]byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded (%d keys), want %q\n%s", k.Len(), tc.want, tc.src)
			}
			if k != nil {
				t.Errorf("Parse returned keys with its error")
			}
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("the error holds a secret: %v", err)
			}
			var ve *keyring.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T, want *ValidationError: %v", err, err)
			}
			var got []string
			for _, p := range ve.Problems {
				got = append(got, p.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], tc.want[i])
				}
			}
			if !strings.HasPrefix(err.Error(), "s3 credentials: ") {
				t.Errorf("Error() = %q", err)
			}
		})
	}
}

const table = `
keys:
- access_key_id: w1
  secret_access_key: ` + sec + `
  grants:
  - {bucket: reports, prefix: jobs/, access: readwrite}
  - {bucket: logs, access: read}
  - {bucket: drop, prefix: in/, access: write}
- access_key_id: w2
  secret_access_key: ` + sec + `2
  grants:
  - {bucket: reports, prefix: jobs, access: read}
  - {bucket: scratch, prefix: "", access: readwrite}
`

func TestAllowed(t *testing.T) {
	k := mustParse(t, table)
	for _, tc := range []struct {
		id, bucket, key string
		read, write     bool
	}{
		{"w1", "reports", "jobs/a", true, true},
		{"w1", "reports", "jobs/", true, true}, // the prefix itself is a key under it
		{"w1", "reports", "jobs/2024/x.csv", true, true},
		{"w1", "reports", "jobs", false, false},         // "jobs/" does not cover "jobs"
		{"w1", "reports", "jobsX/a", false, false},      //
		{"w1", "reports", "jobs/../x", false, false},    // a posix store writes "x"
		{"w1", "reports", "jobs/..", false, false},      //
		{"w1", "reports", "jobs/./x", false, false},     // "." and ".." segments: refused
		{"w1", "reports", "jobs/a/.", false, false},     //
		{"w1", "reports", "jobs/..x/.y", true, true},    // dots inside a segment are fine
		{"w2", "scratch", "../scratch/a", false, false}, // under a whole-bucket grant too
		{"w1", "reports", "../jobs/x", false, false},    //
		{"w1", "reports", "/jobs/a", false, false},      // keys have no leading slash
		{"w1", "reports", "Jobs/a", false, false},       // keys are case-sensitive
		{"w1", "reports", "other/a", false, false},      //
		{"w1", "reports", "", false, false},             // bucket-level: only a whole-bucket grant
		{"w1", "reportsx", "jobs/a", false, false},      //
		{"w1", "Reports", "jobs/a", false, false},       //
		{"w1", "", "jobs/a", false, false},              // no bucket (ListBuckets)
		{"w1", "", "", false, false},                    //
		{"w1", "logs", "any/key", true, false},          // read only
		{"w1", "logs", "", true, false},                 // bucket-level read of a whole-bucket grant
		{"w1", "drop", "in/x", false, true},             // write only
		{"w1", "drop", "out/x", false, false},           //
		{"w2", "reports", "jobs/a", true, false},        // "jobs" covers "jobs/a" and "jobsX"
		{"w2", "reports", "jobsX", true, false},         //
		{"w2", "reports", "job", false, false},          //
		{"w2", "scratch", "", true, true},               // prefix "" is the whole bucket, bucket-level too
		{"w2", "scratch", "a/b", true, true},            //
		{"w2", "logs", "any/key", false, false},         // w1's grant is not w2's
		{"nobody", "reports", "jobs/a", false, false},   //
		{"", "reports", "jobs/a", false, false},         //
		{"W1", "reports", "jobs/a", false, false},       // ids are case-sensitive
	} {
		if got := k.Allowed(tc.id, tc.bucket, tc.key, false); got != tc.read {
			t.Errorf("Allowed(%q, %q, %q, read) = %v, want %v", tc.id, tc.bucket, tc.key, got, tc.read)
		}
		if got := k.Allowed(tc.id, tc.bucket, tc.key, true); got != tc.write {
			t.Errorf("Allowed(%q, %q, %q, write) = %v, want %v", tc.id, tc.bucket, tc.key, got, tc.write)
		}
	}
}

func TestAllowedList(t *testing.T) {
	k := mustParse(t, table)
	for _, tc := range []struct {
		id, bucket, prefix string
		want               bool
	}{
		{"w1", "reports", "jobs/", true},
		{"w1", "reports", "jobs/2024/", true},
		{"w1", "reports", "jobs", false}, // would list "jobsX"
		{"w1", "reports", "job", false},
		{"w1", "reports", "", false}, // the whole bucket
		{"w1", "reports", "other/", false},
		{"w1", "logs", "", true},
		{"w1", "logs", "any", true},
		{"w1", "drop", "in/", false}, // write only: no listing
		{"w1", "scratch", "", false},
		{"w1", "", "", false},
		{"w2", "reports", "jobs", true},
		{"w2", "reports", "jobsX", true},
		{"w2", "reports", "jobs/", true},
		{"w2", "reports", "", false},
		{"w2", "scratch", "", true},
		{"nobody", "logs", "", false},
		{"", "logs", "", false},
	} {
		if got := k.AllowedList(tc.id, tc.bucket, tc.prefix); got != tc.want {
			t.Errorf("AllowedList(%q, %q, %q) = %v, want %v", tc.id, tc.bucket, tc.prefix, got, tc.want)
		}
	}
}

func TestSecret(t *testing.T) {
	k := mustParse(t, table)
	if s, ok := k.Secret("w1"); !ok || s != sec {
		t.Errorf("Secret(w1) = %q, %v", s, ok)
	}
	if s, ok := k.Secret("w2"); !ok || s != sec+"2" {
		t.Errorf("Secret(w2) = %q, %v", s, ok)
	}
	for _, id := range []string{"nobody", "", "W1"} {
		if s, ok := k.Secret(id); ok || s != "" {
			t.Errorf("Secret(%q) = %q, %v; want \"\", false", id, s, ok)
		}
	}
}

func TestNilKeysDenyAll(t *testing.T) {
	var k *keyring.Keys
	if _, ok := k.Secret("w1"); ok || k.Allowed("w1", "reports", "jobs/a", false) || k.AllowedList("w1", "reports", "") || k.Len() != 0 || k.IDs() != nil || k.Grants("w1") != nil {
		t.Fatal("a nil *Keys allows something")
	}
	empty := mustParse(t, "keys: []")
	if _, ok := empty.Secret("w1"); ok || empty.Allowed("w1", "reports", "", false) {
		t.Fatal("keys: [] allows something")
	}
}

func TestGrantsIsACopy(t *testing.T) {
	k := mustParse(t, table)
	g := k.Grants("w1")
	g[0].Prefix = ""
	if k.Allowed("w1", "reports", "other", false) {
		t.Fatal("changing Grants' result changed the keys")
	}
}

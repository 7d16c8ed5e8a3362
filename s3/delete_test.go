package s3

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestDeleteKeys(t *testing.T) {
	for body, want := range map[string][]string{
		`<Delete><Object><Key>a</Key></Object></Delete>`: {"a"},
		`<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Object><Key>jobs/a b</Key><VersionId>3/L4kqtJl40Nr8X8gdRQBpUMLUo</VersionId></Object>
  <Object><Key>x&amp;y&#x41;</Key><ETag>"e"</ETag><Size>3</Size><LastModifiedTime>2024-01-01T00:00:00Z</LastModifiedTime></Object>
  <Object><Key> a </Key></Object>
  <Object><Key>a</Key></Object>
  <Quiet>true</Quiet>
</Delete>
<!-- after -->`: {"jobs/a b", "x&yA", " a ", "a"},
		`<Delete><Quiet>false</Quiet><Object><Key><![CDATA[<k>]]></Key></Object></Delete>`: {"<k>"},
	} {
		got, err := DeleteKeys([]byte(body))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("DeleteKeys(%q) = %q, %v; want %q", body, got, err, want)
		}
	}
}

func TestDeleteKeysRefused(t *testing.T) {
	many := func(n int) string {
		return "<Delete>" + strings.Repeat("<Object><Key>k</Key></Object>", n) + "</Delete>"
	}
	if keys, err := DeleteKeys([]byte(many(MaxDeleteKeys))); err != nil || len(keys) != MaxDeleteKeys {
		t.Fatalf("%d keys: %d, %v", MaxDeleteKeys, len(keys), err)
	}
	for name, body := range map[string]string{
		"empty body":            ``,
		"not XML":               `{"Objects":[]}`,
		"unclosed":              `<Delete><Object><Key>a</Key></Object>`,
		"mismatched end":        `<Delete><Object><Key>a</Object></Key></Delete>`,
		"other root":            `<Remove><Object><Key>a</Key></Object></Remove>`,
		"no object":             `<Delete><Quiet>true</Quiet></Delete>`,
		"too many":              many(MaxDeleteKeys + 1),
		"empty key":             `<Delete><Object><Key></Key></Object></Delete>`,
		"self-closed key":       `<Delete><Object><Key/></Object></Delete>`,
		"no key":                `<Delete><Object><VersionId>v</VersionId></Object></Delete>`,
		"two keys in an object": `<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>`,
		"unknown element":       `<Delete><Object><Key>a</Key><Prefix>b</Prefix></Object></Delete>`,
		"key outside object":    `<Delete><Key>a</Key><Object><Key>b</Key></Object></Delete>`,
		"nested object":         `<Delete><Object><Object><Key>a</Key></Object></Object></Delete>`,
		"element in key":        `<Delete><Object><Key>a<b/></Key></Object></Delete>`,
		"text and CDATA":        `<Delete><Object><Key>a<![CDATA[b]]></Key></Object></Delete>`,
		"comment in key":        `<Delete><Object><Key>a<!--x-->b</Key></Object></Delete>`,
		"comment inside":        `<Delete><!--x--><Object><Key>a</Key></Object></Delete>`,
		"stray text":            `<Delete>x<Object><Key>a</Key></Object></Delete>`,
		"second root":           `<Delete><Object><Key>a</Key></Object></Delete><Delete><Object><Key>b</Key></Object></Delete>`,
		"text after root":       `<Delete><Object><Key>a</Key></Object></Delete>b`,
		"doctype":               `<!DOCTYPE Delete [<!ENTITY e "b">]><Delete><Object><Key>a&e;</Key></Object></Delete>`,
		"unknown entity":        `<Delete><Object><Key>a&nbsp;</Key></Object></Delete>`,
		"other namespace":       `<Delete xmlns="urn:x"><Object><Key>a</Key></Object></Delete>`,
		"two Quiet":             `<Delete><Quiet>true</Quiet><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>`,
		"other encoding":        `<?xml version="1.0" encoding="ISO-8859-1"?><Delete><Object><Key>a</Key></Object></Delete>`,
		"invalid character":     "<Delete><Object><Key>a\x01</Key></Object></Delete>",
	} {
		keys, err := DeleteKeys([]byte(body))
		if !errors.Is(err, ErrMalformedDelete) {
			t.Errorf("%s: %q, %v; want ErrMalformedDelete", name, keys, err)
		}
	}
}

func TestKeyPath(t *testing.T) {
	for key, want := range map[string]string{
		"a":         "/bkt/a",
		"jobs/a b":  "/bkt/jobs/a%20b",
		"x;y,z?#%":  "/bkt/x%3By%2Cz%3F%23%25",
		"/lead//x/": "/bkt//lead//x/",
		"ü\\":       "/bkt/%C3%BC%5C",
	} {
		if got := KeyPath("/bkt", key); got != want {
			t.Errorf("KeyPath(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzDeleteObjects: DeleteKeys never panics, refuses only with
// ErrMalformedDelete, and the keys it returns are 1 to MaxDeleteKeys
// non-empty strings that a body written from them gives back unchanged.
func FuzzDeleteObjects(f *testing.F) {
	for _, s := range []string{
		`<Delete><Object><Key>a</Key></Object></Delete>`,
		`<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a/b</Key><VersionId>v</VersionId></Object><Quiet>true</Quiet></Delete>`,
		`<Delete><Object><Key>x&amp;y</Key></Object><Object><Key><![CDATA[<k>]]></Key></Object></Delete>`,
		`<Delete><Object><Key></Key></Object></Delete>`,
		`<!DOCTYPE x><Delete/>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := DeleteKeys(body)
		if err != nil {
			if !errors.Is(err, ErrMalformedDelete) {
				t.Fatalf("error %v is not ErrMalformedDelete", err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > MaxDeleteKeys {
			t.Fatalf("%d keys", len(keys))
		}
		var b strings.Builder
		b.WriteString("<Delete>")
		for _, k := range keys {
			if k == "" {
				t.Fatal("an empty key")
			}
			fmt.Fprintf(&b, "<Object><Key>%s</Key></Object>", escapeXML(k))
		}
		b.WriteString("</Delete>")
		again, err := DeleteKeys([]byte(b.String()))
		if err != nil || !slices.Equal(again, keys) {
			t.Fatalf("keys %q written back and read again: %q, %v", keys, again, err)
		}
	})
}

// escapeXML escapes every byte a text node may not hold as is, as a
// character reference (also "\r", which XML parsers read as "\n").
func escapeXML(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '<' || r == '&' || r == '>' || r == '\r' || r == '\t' || r == '\n':
			fmt.Fprintf(&b, "&#x%X;", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

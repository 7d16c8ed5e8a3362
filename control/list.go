package control

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/fence"
)

// listQuery reads a listing's query, each parameter at most once (else
// errBadQuery): limit 1..maxListLimit (default
// defaultListLimit; else errBadLimit, 400 bad_request), and prefix and
// after checked with fence.Prefix (400 bad_resource): no key holds what the
// resolver refuses.
func listQuery(q url.Values) (prefix, after string, limit int, err error) {
	var params [3]string // limit, prefix, after
	for i, name := range []string{"limit", "prefix", "after"} {
		if params[i], _, err = queryValue(q, name); err != nil {
			return "", "", 0, err
		}
	}
	limit = defaultListLimit
	if v := params[0]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return "", "", 0, detailed(errBadLimit, fmt.Sprintf("limit is a number from 1 to %d", maxListLimit))
		}
		limit = n
	}
	prefix, after = params[1], params[2]
	for _, v := range []string{prefix, after} {
		if err := fence.Prefix(v); err != nil {
			return "", "", 0, err
		}
	}
	return prefix, after, limit, nil
}

// page reads up to limit items in key order after after through list
// (which returns at most n items after its argument), leaving out the items
// skip reports. next is the last item's key when the page is full ("" when
// the store has no more).
func page[T any](list func(after string, n int) ([]T, error), key func(T) string, after string, limit int, skip func(T) bool) (items []T, next string, err error) {
	for len(items) < limit {
		want := limit - len(items)
		got, err := list(after, want)
		if err != nil {
			return nil, "", err
		}
		for _, it := range got {
			after = key(it)
			if !skip(it) {
				items = append(items, it)
			}
		}
		if len(got) < want {
			return items, "", nil // the store has no more
		}
	}
	return items, key(items[len(items)-1]), nil
}

// notUTF8 returns a skip for page that leaves out, with a warning each,
// records whose key is not valid UTF-8: such keys were stored before the
// proxy refused them, no request can name them any more, and JSON cannot
// carry them (a cursor made from one repeated its page for ever).
func notUTF8[T any](log *slog.Logger, listing string, key func(T) string) func(T) bool {
	return func(it T) bool {
		if utf8.ValidString(key(it)) {
			return false
		}
		log.Warn(listing+" skips a record whose key is not valid UTF-8 (stored by an older version; no request can name it)",
			"key", strconv.Quote(key(it)))
		return true
	}
}

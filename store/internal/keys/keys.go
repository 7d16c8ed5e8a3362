// Package keys is the layout of the keys that store/badger and store/etcd
// share: S3 multipart upload records and the index of prefix fences. It is a
// storage format: Badger directories and etcd clusters written before hold
// these exact bytes, so a change here is a data migration (keys_test.go pins
// them).
package keys

import (
	"encoding/binary"
	"strings"
)

// PrefixIndexVersion is the value of a store's prefix-index marker key: the
// index of prefix fences is complete in this layout. A store that finds the
// marker absent (written before the index existed) or holding another value
// builds the index again at open.
const PrefixIndexVersion = "1"

// IsPrefix reports whether resource is a prefix fence: its name ends in "/".
func IsPrefix(resource string) bool { return strings.HasSuffix(resource, "/") }

// PrefixIndex returns the key of resource's entry in the index of prefix
// fences with a maximum above 0: kind (Badger's "prefixes/", etcd's Prefix +
// "x/") + resource, so key order is resource order. Its value is the
// maximum, 8 bytes big-endian, as the fence record's; written in the same
// transaction as every raise of the fence, deleted with it by a reset.
func PrefixIndex(kind, resource string) []byte {
	return append([]byte(kind), resource...)
}

// Upload appends the name of resource's upload uploadID to kind (the
// store's namespace of upload records: Badger's "upload/", etcd's Prefix +
// "u/") and returns the key: kind + uvarint(len(resource)) + resource +
// uploadID. The length prefix makes the key unique to its pair: no other
// (resource, uploadID) spells it, whatever bytes either holds.
func Upload(kind, resource, uploadID string) []byte {
	k := make([]byte, 0, len(kind)+binary.MaxVarintLen64+len(resource)+len(uploadID))
	k = append(k, kind...)
	k = binary.AppendUvarint(k, uint64(len(resource)))
	k = append(k, resource...)
	return append(k, uploadID...)
}

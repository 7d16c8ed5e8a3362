// Package keys is the layout of the S3 multipart upload record keys that
// store/badger and store/etcd share. It is a storage format: Badger
// directories and etcd clusters written before hold these exact bytes, so
// a change here is a data migration (keys_test.go pins them).
package keys

import "encoding/binary"

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

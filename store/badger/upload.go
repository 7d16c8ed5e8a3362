package badger

import (
	"errors"
	"math"
	"time"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// uploadPrefix namespaces S3 multipart upload records beside the fences and
// leases. Key = uploadPrefix + uvarint(len(resource)) + resource + upload
// ID (keys.Upload, the layout etcd's store shares), so that no (resource,
// ID) pair spells another's key; value = the
// creator's token, 8 bytes big-endian. Badger's own expiry (ExpiresAt)
// removes a record at its age limit.
const uploadPrefix = "upload/"

func uploadKey(resource, uploadID string) []byte {
	return keys.Upload(uploadPrefix, resource, uploadID)
}

// PutUpload records that resource's S3 multipart upload uploadID was created
// with token, synced before it returns, until expires (to the second; an
// expiry not after the current second only removes an earlier record) or
// DeleteUpload. Errors: ErrRange when token > 2^63-1, nothing written;
// ErrClosed after Close; ErrDirGone; ErrNoSpace below Options.MinFreeSpace;
// Badger errors.
func (s *Store) PutUpload(resource, uploadID string, token uint64, expires time.Time) error {
	if token > math.MaxInt64 {
		return ErrRange
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	if err := s.space.check(); err != nil {
		return err
	}
	k := uploadKey(resource, uploadID)
	return s.withDB(func(db *badgerdb.DB) error {
		return db.Update(func(txn *badgerdb.Txn) error {
			if expires.Unix() <= time.Now().Unix() {
				return txn.Delete(k) // Badger reads ExpiresAt 0 as "never"
			}
			e := badgerdb.NewEntry(k, encode(token))
			e.ExpiresAt = uint64(expires.Unix())
			return txn.SetEntry(e)
		})
	})
}

// Upload returns the token of resource's upload uploadID, found=false when
// there is no record or it has expired. Errors: ErrClosed after Close;
// Badger read errors, and a record that is not 8 bytes.
func (s *Store) Upload(resource, uploadID string) (token uint64, found bool, err error) {
	var rec []byte
	err = s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			var err error
			rec, err = readRaw(txn, uploadKey(resource, uploadID))
			return err
		})
	})
	if err != nil || rec == nil {
		return 0, false, err
	}
	token, err = decode(resource, rec)
	return token, err == nil, err
}

// DeleteUpload removes the record, if any, synced before it returns.
// Errors: ErrClosed after Close; ErrDirGone; Badger errors.
func (s *Store) DeleteUpload(resource, uploadID string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.Update(func(txn *badgerdb.Txn) error { return txn.Delete(uploadKey(resource, uploadID)) })
	})
	if errors.Is(err, badgerdb.ErrKeyNotFound) {
		return nil
	}
	return err
}

package etcd

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// uploadKey is Prefix + "u/" + uvarint(len(resource)) + resource + uploadID
// (keys.Upload, the layout Badger's store shares): no (resource, uploadID)
// pair spells another's key.
func (s *Store) uploadKey(resource, uploadID string) string {
	return string(keys.Upload(s.prefix+kindUpload, resource, uploadID))
}

// PutUpload records that resource's S3 multipart upload uploadID was created
// with token, durable before it returns, until expires (to the second) or
// DeleteUpload; a second Put replaces the first. The value is the token and
// the expiry (Unix seconds), 8 bytes big-endian each; the key is put with an
// etcd lease of the remaining seconds, which removes it from etcd some time
// after the expiry (Upload stops finding it at the expiry itself). An expiry
// not after the current second only removes an earlier record. Two round
// trips (grant the lease, put).
// Errors: ErrRange when token > 2^63-1, nothing written; ErrClosed; the
// client's, wrapped.
func (s *Store) PutUpload(resource, uploadID string, token uint64, expires time.Time) error {
	if token > math.MaxInt64 {
		return ErrRange
	}
	if s.closed.Load() {
		return ErrClosed
	}
	k := s.uploadKey(resource, uploadID)
	ttl := expires.Unix() - time.Now().Unix()
	err := s.do(func(ctx context.Context) error {
		if ttl <= 0 {
			_, err := s.kv.Delete(ctx, k)
			return err
		}
		lease, err := s.lessor.Grant(ctx, ttl)
		if err != nil {
			return err
		}
		v := make([]byte, 16)
		binary.BigEndian.PutUint64(v, token)
		binary.BigEndian.PutUint64(v[8:], uint64(expires.Unix()))
		_, err = s.kv.Put(ctx, k, string(v), clientv3.WithLease(lease.ID))
		return err
	})
	if err != nil {
		return s.wrap("put upload", resource, err)
	}
	return nil
}

// Upload returns the token of resource's upload uploadID, found=false when
// there is no record or its expiry has passed (by this machine's clock, to
// the second). Errors: ErrClosed; ErrCorrupt; the client's, wrapped.
func (s *Store) Upload(resource, uploadID string) (token uint64, found bool, err error) {
	if s.closed.Load() {
		return 0, false, ErrClosed
	}
	var v []byte
	err = s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, s.uploadKey(resource, uploadID))
		if err == nil && len(resp.Kvs) > 0 {
			v = resp.Kvs[0].Value
		}
		return err
	})
	if err != nil {
		return 0, false, s.wrap("upload", resource, err)
	}
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 16 {
		return 0, false, s.wrap("upload", resource, fmt.Errorf("%w: an upload record of %d bytes, want 16", ErrCorrupt, len(v)))
	}
	if time.Now().Unix() >= int64(binary.BigEndian.Uint64(v[8:])) {
		return 0, false, nil
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// DeleteUpload removes the record, durably; none is no error.
// Errors: ErrClosed; the client's, wrapped.
func (s *Store) DeleteUpload(resource, uploadID string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.do(func(ctx context.Context) error {
		_, err := s.kv.Delete(ctx, s.uploadKey(resource, uploadID))
		return err
	})
	if err != nil {
		return s.wrap("delete upload", resource, err)
	}
	return nil
}

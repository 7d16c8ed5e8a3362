package etcd

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/storetest"
)

// config is a client configuration for c, without the client's logging.
func config(c *etcdtest.Cluster) clientv3.Config {
	return clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
}

// The etcd store passes the storage contract's conformance suite against a
// real one-member etcd. Each subtest's new, empty storage is a prefix of its
// own in that etcd.
func TestConformance(t *testing.T) {
	c := etcdtest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := fmt.Sprintf("/conformance/%d/", n.Add(1))
		return func() (store.Store, error) {
			s, err := Open(config(c), Options{Prefix: prefix})
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

//go:build !unix

package upstream

import "net"

// idle cannot look without reading here; a closed connection then shows as
// a failed request.
func idle(net.Conn) bool { return true }

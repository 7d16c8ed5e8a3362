//go:build !unix

package upstream

// guardedWrite asks the guard once before the write where the system call
// cannot be reached.
func guardedWrite(c *guardConn, p []byte, guard func() error) (int, error) {
	if err := guard(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

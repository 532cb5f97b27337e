package reentrant

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Nodes that failed alike are named together, each failure said once, and
// every node's error stays reachable.
func TestNodeErrorsSayEachFailureOnce(t *testing.T) {
	refused := func(port int) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	}
	timeout := func(local, port int) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: local},
			Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, Err: errors.New("i/o timeout")}
	}
	other := errors.New("READONLY You can't write against a read only replica.")
	var e nodeErrors
	require.NoError(t, e.err())
	e.add(1, refused(7001))
	e.add(2, other)
	e.add(4, refused(7004))
	e.add(5, timeout(50001, 7005))
	e.add(6, timeout(50002, 7006))
	err := e.err()
	require.EqualError(t, err, "nodes 1, 4: dial tcp: connect: connection refused (127.0.0.1:7001, 127.0.0.1:7004); node 2: "+other.Error()+
		"; nodes 5, 6: read tcp: i/o timeout (127.0.0.1:7005, 127.0.0.1:7006)")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorIs(t, err, other)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
}

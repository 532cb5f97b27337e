package reentrant

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// nodeErrors is the errors of several Redlock nodes, said once for the
// nodes that failed alike: "nodes 1, 3, 4: dial tcp: connect: connection
// refused (127.0.0.1:7001, 127.0.0.1:7003, 127.0.0.1:7004)". errors.Is and
// errors.As see every node's error.
type nodeErrors struct {
	nodes []int
	errs  []error
}

// add records node i's error.
func (e *nodeErrors) add(i int, err error) {
	e.nodes = append(e.nodes, i)
	e.errs = append(e.errs, err)
}

// err is e, or nil when no node failed.
func (e *nodeErrors) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return e
}

func (e *nodeErrors) Error() string {
	type group struct{ nodes, addrs []string }
	var order []string
	groups := map[string]*group{}
	for k, err := range e.errs {
		msg, addr := err.Error(), ""
		var op *net.OpError
		if errors.As(err, &op) && op.Addr != nil {
			// The same failure at another address reads the same: the
			// node's address, and the local one of a read or write
			// ("src->addr"), leave the message.
			addr = op.Addr.String()
			at := addr
			if op.Source != nil {
				at = op.Source.String() + "->" + addr
			}
			msg = strings.Replace(msg, " "+at, "", 1)
		}
		g := groups[msg]
		if g == nil {
			g = &group{}
			groups[msg] = g
			order = append(order, msg)
		}
		g.nodes = append(g.nodes, strconv.Itoa(e.nodes[k]))
		if addr != "" {
			g.addrs = append(g.addrs, addr)
		}
	}
	parts := make([]string, 0, len(order))
	for _, msg := range order {
		g := groups[msg]
		s := "node " + g.nodes[0] + ": " + msg
		if len(g.nodes) > 1 {
			s = "nodes " + strings.Join(g.nodes, ", ") + ": " + msg
		}
		if len(g.addrs) > 0 {
			s += " (" + strings.Join(g.addrs, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func (e *nodeErrors) Unwrap() []error { return e.errs }

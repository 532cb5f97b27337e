package fencehttp_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence/fencehttp"
)

// idleCounter is a base transport that counts CloseIdleConnections.
type idleCounter struct {
	http.RoundTripper
	closed int
}

func (c *idleCounter) CloseIdleConnections() { c.closed++ }

// http.Client.CloseIdleConnections reaches the base transport through the
// wrapper, and a base without the method is left alone.
func TestTransportClosesIdleConnections(t *testing.T) {
	base := &idleCounter{RoundTripper: http.DefaultTransport}
	(&http.Client{Transport: fencehttp.Transport(base)}).CloseIdleConnections()
	require.Equal(t, 1, base.closed)
	plain := http.RoundTripper(struct{ http.RoundTripper }{http.DefaultTransport})
	(&http.Client{Transport: fencehttp.Transport(plain)}).CloseIdleConnections()
}

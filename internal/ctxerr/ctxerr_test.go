package ctxerr

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWith(t *testing.T) {
	require.NoError(t, Of(t.Context()), "a live context")
	require.NoError(t, With(context.Background(), nil))
	other := errors.New("disk full")
	live := t.Context()
	require.Same(t, other, With(live, other), "a live context adds nothing")

	plain, cancel := context.WithCancel(t.Context())
	cancel()
	require.Equal(t, context.Canceled, Of(plain), "no cause of its own: the context's error alone")
	require.Equal(t, "interrupted: context canceled", With(plain, errors.New("interrupted")).Error())

	lost := errors.New("lease lost: client closed")
	caused, stop := context.WithCancelCause(t.Context())
	stop(lost)
	err := Of(caused)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, lost)
	require.Equal(t, "context canceled: lease lost: client closed", err.Error())
	err = With(caused, errors.New("interrupted"))
	require.Equal(t, "interrupted: context canceled: lease lost: client closed", err.Error())
	require.Equal(t, err.Error(), With(caused, err).Error(), "said once")
}

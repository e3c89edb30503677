package devetcd_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/devetcd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, s *devetcd.Server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTwoServersInOneProcess(t *testing.T) {
	ctx := context.Background()
	a, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	require.NoError(t, err)
	defer a.Close()
	b, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	require.NoError(t, err)
	defer b.Close()
	require.NotEqual(t, a.Endpoints(), b.Endpoints())

	ca, cb := client(t, a), client(t, b)
	_, err = ca.Put(ctx, "k", "from-a")
	require.NoError(t, err)
	resp, err := cb.Get(ctx, "k")
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the servers are separate clusters")
	resp, err = ca.Get(ctx, "k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "from-a", string(resp.Kvs[0].Value))
}

func TestCloseRemovesTempDir(t *testing.T) {
	s, err := devetcd.Start(context.Background(), devetcd.WithoutFsync())
	require.NoError(t, err)
	dir := s.Dir()
	require.DirExists(t, dir)
	require.NoError(t, s.Close())
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "temp dir %s should be removed", dir)
	require.NoError(t, s.Close(), "Close twice is safe")
}

func TestPersistentDirKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := devetcd.Start(ctx, devetcd.WithDir(dir))
	require.NoError(t, err)
	c := client(t, s)
	_, err = c.Put(ctx, "kept", "yes")
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, s.Close())
	require.DirExists(t, dir)

	s, err = devetcd.Start(ctx, devetcd.WithDir(dir))
	require.NoError(t, err)
	defer s.Close()
	resp, err := client(t, s).Get(ctx, "kept")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "yes", string(resp.Kvs[0].Value))
}

func TestMaxTxnOpsOption(t *testing.T) {
	ctx := context.Background()
	s, err := devetcd.Start(ctx, devetcd.WithoutFsync(), devetcd.WithMaxTxnOps(4))
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, uint(4), s.MaxTxnOps())
	c := client(t, s)
	ops := make([]clientv3.Op, 5)
	for i := range ops {
		ops[i] = clientv3.OpPut(string(rune('a'+i)), "v")
	}
	_, err = c.Txn(ctx).Then(ops...).Commit()
	require.Error(t, err, "five ops exceed the limit of four")
	_, err = c.Txn(ctx).Then(ops[:4]...).Commit()
	require.NoError(t, err)
}

func TestStartHonoursCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := devetcd.Start(ctx, devetcd.WithoutFsync())
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, s)
}

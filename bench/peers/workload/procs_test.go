package workload

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// peerEnv makes the test binary a peer process: it writes to its standard output, which the
// test discards, until its standard input closes or a minute has passed.
const peerEnv = "WORKLOAD_TEST_PEER"

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) == "1" {
		writePeer()
		return
	}
	os.Exit(m.Run())
}

// writePeer writes a byte at a time, so that it makes many write calls and uses processor
// time, until its standard input closes or a minute has passed.
func writePeer() {
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	fmt.Println("ready")
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-closed:
			return
		default:
		}
		for range 1000 {
			_, _ = os.Stdout.Write([]byte{0})
		}
	}
}

// startPeer starts a peer process and returns its process ID; the test stops it.
func startPeer(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd.Process.Pid
}

func TestAWindowCountsWhatItsPeersUse(t *testing.T) {
	pid := startPeer(t)
	SetPeers([]int{pid})
	t.Cleanup(func() { SetPeers(nil) })

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	go func() { _, _ = io.Copy(io.Discard, r) }()

	window := StartCPUWindow()
	for range 500 {
		_, err := w.Write([]byte{1})
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond)
	own, procs := window.End()
	require.NotNil(t, procs)
	require.GreaterOrEqual(t, procs.Syscalls, int64(500), "this process wrote 500 times")
	require.Greater(t, procs.PeerSyscalls, int64(1000), "the peer writes a byte at a time")
	require.Greater(t, procs.PeerCPUSeconds, 0.01, "the peer runs throughout the window of 0.3s")
	require.InDelta(t, own, procs.CPUSeconds, 0.05)

	cpu, peerCPU, calls, peerCalls, ok := procs.PerOp(100)
	require.True(t, ok)
	require.InDelta(t, procs.CPUSeconds/100, cpu, 1e-12)
	require.InDelta(t, procs.PeerCPUSeconds/100, peerCPU, 1e-12)
	require.InDelta(t, float64(procs.Syscalls)/100, calls, 1e-12)
	require.InDelta(t, float64(procs.PeerSyscalls)/100, peerCalls, 1e-12)
	_, _, _, _, ok = procs.PerOp(0)
	require.False(t, ok)
	_, _, _, _, ok = (*Processes)(nil).PerOp(10)
	require.False(t, ok)
}

func TestAWindowWithoutPeersReportsItsOwnProcess(t *testing.T) {
	SetPeers(nil)
	window := StartCPUWindow()
	_, procs := window.End()
	require.NotNil(t, procs)
	require.Zero(t, procs.PeerCPUSeconds)
	require.Zero(t, procs.PeerSyscalls)
}

func TestAPeerThatIsGoneLeavesTheWindowUnmeasured(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Run())
	SetPeers([]int{cmd.Process.Pid}) // exited and reaped: its /proc entry is gone
	t.Cleanup(func() { SetPeers(nil) })
	window := StartCPUWindow()
	own, procs := window.End()
	require.Nil(t, procs)
	require.GreaterOrEqual(t, own, 0.0)

	_, err := processCPUOf(strconv.Itoa(cmd.Process.Pid))
	require.Error(t, err)
	_, err = readWriteSyscalls(strconv.Itoa(cmd.Process.Pid))
	require.Error(t, err)
}

func TestProcessCPUOfReadsThisProcess(t *testing.T) {
	got, err := processCPUOf(strconv.Itoa(os.Getpid()))
	require.NoError(t, err)
	own := ProcessCPU()
	// /proc counts in clock ticks of 10 ms; getrusage is exact.
	require.InDelta(t, own.Seconds(), got.Seconds(), 0.05)
}

package gopool_test

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/zlink-go/zlink/rt/internal/gopool"
	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// idleWorkers waits until p has n idle workers.
func idleWorkers(t *testing.T, p *gopool.Pool, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return p.IdleWorkers() == n }, wait.Bound, time.Millisecond,
		"idle workers: %d, want %d", p.IdleWorkers(), n)
}

// workers waits until the process has n goroutines of pools' workers, counted in a dump of
// every goroutine's stack.
func workers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(wait.Bound)
	for {
		got := workerGoroutines()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers: %d, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// busyTask gives p a task that runs until release is closed, once it has started.
func busyTask(t *testing.T, p *gopool.Pool) (release chan struct{}) {
	t.Helper()
	release, started := make(chan struct{}), make(chan struct{})
	p.Go(func() {
		close(started)
		<-release
	})
	wait.For(t, started)
	return release
}

// onAWorker reports whether the calling goroutine is a pool's worker.
func onAWorker() bool {
	buf := make([]byte, 1<<16)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "gopool.(*Pool).work(")
}

func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "gopool.(*Pool).work(")
}

// goCounted gives p a task that counts itself in ran, waited for in wg.
func goCounted(p *gopool.Pool, wg *sync.WaitGroup, ran *atomic.Int64) {
	wg.Add(1)
	p.Go(func() {
		defer wg.Done()
		ran.Add(1)
	})
}

func TestEveryTaskRuns(t *testing.T) {
	p := gopool.New(4, time.Minute)
	defer p.Close()
	var wg sync.WaitGroup
	var ran atomic.Int64
	for range 1000 {
		goCounted(p, &wg, &ran)
	}
	wg.Wait()
	assert.EqualValues(t, 1000, ran.Load())
}

func TestTasksRunOnWorkersThatWaitForThem(t *testing.T) {
	// One idle worker at most: one started because its task came before the idle one waited
	// ends rather than wait as well.
	p := gopool.New(1, time.Minute)
	defer p.Close()
	ran := make(chan uint64, 1)
	seen := map[uint64]bool{}
	const tasks = 50
	for range tasks {
		p.Go(func() { ran <- goroutineID() })
		seen[wait.For(t, ran)] = true
		idleWorkers(t, p, 1)
		time.Sleep(time.Millisecond) // for it to reach its wait: counted idle, it may not be there yet
	}
	// A task given while its worker has not yet begun to wait starts another, now and then;
	// without the hand-off every task would.
	assert.Less(t, len(seen), tasks/2, "tasks ran on %d goroutines", len(seen))
}

// goroutineID is the ID of the calling goroutine, from its stack trace's header.
func goroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

func TestAtMostMaxIdleWorkersWait(t *testing.T) {
	p := gopool.New(2, time.Minute)
	defer p.Close()
	release := make(chan struct{})
	var started sync.WaitGroup
	for range 10 {
		started.Add(1)
		p.Go(func() {
			started.Done()
			<-release
		})
	}
	started.Wait()
	// (A worker of an earlier pool may still be on its way out after its Close.)
	assert.GreaterOrEqual(t, workerGoroutines(), 10)
	close(release)
	// Of the ten workers, the two that wait are all that is left.
	workers(t, 2)
	assert.Equal(t, 2, p.IdleWorkers())
}

func TestAnIdleWorkerEndsAfterItsIdleTime(t *testing.T) {
	p := gopool.New(4, 20*time.Millisecond)
	defer p.Close()
	ran := make(chan uint64, 1)
	p.Go(func() { ran <- goroutineID() })
	first := wait.For(t, ran)
	workers(t, 0)
	assert.Equal(t, 0, p.IdleWorkers())
	// A task after that runs on a new worker.
	p.Go(func() { ran <- goroutineID() })
	assert.NotEqual(t, first, wait.For(t, ran))
}

func TestCloseWaitsForABusyWorkersTask(t *testing.T) {
	p := gopool.New(4, time.Minute)
	defer p.Close()
	release := busyTask(t, p)
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a task ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	wait.For(t, closed)
	assert.Equal(t, 0, p.IdleWorkers())
}

func TestATaskGivenAfterStopRunsOnAGoroutineOfItsOwn(t *testing.T) {
	p := gopool.New(4, time.Minute)
	defer p.Close()
	first := make(chan struct{})
	p.Go(func() { close(first) })
	wait.For(t, first)
	idleWorkers(t, p, 1)
	p.Stop()
	idleWorkers(t, p, 0)
	onWorker := make(chan bool, 1)
	p.Go(func() { onWorker <- onAWorker() })
	assert.False(t, wait.For(t, onWorker))
	workers(t, 0)
}

func TestStopLetsABusyWorkerEndWithItsTask(t *testing.T) {
	p := gopool.New(4, time.Hour)
	defer p.Close()
	release := busyTask(t, p)
	p.Stop()
	close(release)
	// Not by its idle time, an hour.
	workers(t, 0)
	p.Close()
}

func TestTasksGivenWhileThePoolClosesAllRun(t *testing.T) {
	for range 20 {
		p := gopool.New(2, time.Minute)
		var ran atomic.Int64
		var tasks, givers sync.WaitGroup
		for range 8 {
			givers.Go(func() {
				for range 50 {
					goCounted(p, &tasks, &ran)
				}
			})
		}
		p.Close()
		givers.Wait()
		tasks.Wait()
		require.EqualValues(t, 400, ran.Load())
		assert.Equal(t, 0, p.IdleWorkers())
	}
}

// deep needs a stack of some 16 KiB, about what a creation's calls through the etcd client
// need.
//
//go:noinline
func deep(n int) byte {
	var frame [512]byte
	frame[n%len(frame)] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deep(n-1) + frame[n%len(frame)]
}

var sink atomic.Int64

// BenchmarkDeepTask runs tasks that need a deep stack on a goroutine each and on a pool's
// workers, 64 at a time.
//
//	go test -run '^$' -bench BenchmarkDeepTask -benchmem ./rt/internal/gopool/
func BenchmarkDeepTask(b *testing.B) {
	run := func(b *testing.B, start func(func())) {
		slots := make(chan struct{}, 64)
		var wg sync.WaitGroup
		b.ReportAllocs()
		for range b.N {
			slots <- struct{}{}
			wg.Add(1)
			start(func() {
				defer wg.Done()
				sink.Add(int64(deep(28)))
				<-slots
			})
		}
		wg.Wait()
	}
	b.Run("goroutine", func(b *testing.B) { run(b, func(f func()) { go f() }) })
	b.Run("pool", func(b *testing.B) {
		p := gopool.New(0, 0)
		defer p.Close()
		run(b, p.Go)
	})
}

func TestATaskRunsWithoutTheLabelsOfTheGoroutineThatStartedItsWorkerOrOfTheTaskBefore(t *testing.T) {
	p := gopool.New(1, time.Minute)
	defer p.Close()
	labelled := pprof.WithLabels(context.Background(), pprof.Labels("tenant", "alice"))
	type seen struct {
		labels    string
		goroutine uint64
	}
	first, second := make(chan seen, 1), make(chan seen, 1)
	// The worker starts on a labelled goroutine, and its first task labels it too.
	pprof.Do(context.Background(), pprof.Labels("tenant", "bob"), func(context.Context) {
		p.Go(func() {
			first <- seen{labelsHere(t), goroutineID()}
			pprof.SetGoroutineLabels(labelled)
		})
	})
	one := wait.For(t, first)
	assert.NotContains(t, one.labels, "tenant")
	// Until a task runs on that worker: one given before the worker waits starts another
	// (which carries no label), and with one idle worker at most, that one then ends.
	for range 100 {
		idleWorkers(t, p, 1)
		time.Sleep(time.Millisecond) // for it to reach its wait
		p.Go(func() { second <- seen{labelsHere(t), goroutineID()} })
		two := wait.For(t, second)
		assert.NotContains(t, two.labels, "tenant")
		if two.goroutine == one.goroutine {
			return
		}
	}
	t.Fatal("no task ran on the first worker again")
}

// labelsHere returns the profiler labels of the calling goroutine, as the goroutine profile
// prints them ("# labels: {...}"), or "" for none.
func labelsHere(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	for record := range strings.SplitSeq(buf.String(), "\n\n") {
		if strings.Contains(record, "labelsHere") {
			for line := range strings.SplitSeq(record, "\n") {
				if strings.HasPrefix(line, "# labels:") {
					return line
				}
			}
			return ""
		}
	}
	t.Fatal("the goroutine profile has no labelsHere")
	return ""
}

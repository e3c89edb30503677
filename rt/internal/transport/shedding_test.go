package transport_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/capacity"
	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/rt/internal/wire"
	"github.com/zlink-go/zlink/sdk"
)

// longPolls is a test's caller "a" of a node "b" whose calls wait for their cancellations (long
// polls), except those of the method "quick", answered at once, and those of the method "job",
// which run one at a time for jobStep each. polling counts the long polls under way.
type longPolls struct {
	a       *transport.Transport
	polling atomic.Int64
	taken   atomic.Int64 // calls of "job" that b took in
}

const jobStep = 100 * time.Millisecond

// startLongPolls serves "b" with meter and maxMessage, and a StallTimeout of 300 ms, and
// connects "a" to it. take, when set, is what a long poll takes when it starts (a job's
// permit); the func it returns gives that back when the long poll ends.
func startLongPolls(t *testing.T, meter *capacity.Meter, maxMessage int, take func(context.Context) (func(), error)) *longPolls {
	return startLongPollsWith(t, meter, maxMessage, 300*time.Millisecond, take)
}

// startLongPollsWith is startLongPolls with b's StallTimeout.
func startLongPollsWith(t *testing.T, meter *capacity.Meter, maxMessage int, stall time.Duration, take func(context.Context) (func(), error)) *longPolls {
	t.Helper()
	lp := &longPolls{}
	var handlers sync.WaitGroup
	t.Cleanup(handlers.Wait) // after the transport's close, which ends their contexts
	var oneJob sync.Mutex
	b := start(t, "b", handler{fn: func(ctx context.Context, _ sdk.NodeID, req *wire.Request, reply func(*wire.Reply)) {
		if req.Method == "quick" {
			reply(&wire.Reply{})
			return
		}
		handlers.Go(func() {
			giveBack := func() {}
			if take != nil {
				var err error
				if giveBack, err = take(ctx); err != nil {
					reply(&wire.Reply{Error: wire.EncodeError(err)})
					return
				}
			}
			if req.Method == "job" {
				lp.taken.Add(1)
				oneJob.Lock()
				time.Sleep(jobStep)
				oneJob.Unlock()
			} else {
				lp.polling.Add(1)
				<-ctx.Done() // it ends with its caller
				lp.polling.Add(-1)
			}
			giveBack()
			reply(&wire.Reply{})
		})
	}}, func(c *transport.Config) {
		c.Meter = meter
		c.MaxMessageSize = maxMessage
		c.StallTimeout = stall
	})
	lp.a = start(t, "a", handler{}, nil)
	lp.a.Connect("b", b.Addr())
	waitReady(t, lp.a, "b")
	return lp
}

// poll starts n long polls of payload bytes each, and returns the func that gives them up and
// a channel of their ends.
func (lp *longPolls) poll(n, payload int) (giveUp func(), ended <-chan error) {
	polls, cancel := context.WithCancel(context.Background())
	ends := make(chan error, n)
	for range n {
		go func() {
			_, err := lp.a.Call(polls, "b", &wire.Request{Payload: make([]byte, payload)})
			ends <- err
		}()
	}
	return cancel, ends
}

// quick is call of the method "quick".
func (lp *longPolls) quick(payload int) (*wire.Reply, error) {
	return lp.call("quick", payload)
}

// call calls method with payload bytes, within 20 s, and returns its reply and the error that
// the call or the reply carries.
func (lp *longPolls) call(method string, payload int) (*wire.Reply, error) {
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := lp.a.Call(cctx, "b", &wire.Request{Method: method, Payload: make([]byte, payload)})
	if err != nil {
		return nil, err
	}
	return r, wire.DecodeError(r.Error)
}

// refusedOfTwo makes two calls of "quick" with payload bytes at once, and returns how many of
// them were refused for want of room (sdk.ErrInboundBudget); it fails the test on any other
// error.
func (lp *longPolls) refusedOfTwo(t *testing.T, payload int) int {
	t.Helper()
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := lp.quick(payload); errs <- err }()
	}
	refused := 0
	for range 2 {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, sdk.ErrInboundBudget)
			refused++
		}
	}
	return refused
}

// jobs starts n calls of "job" with payload bytes, and returns a channel of their errors.
func (lp *longPolls) jobs(n, payload int) <-chan error {
	ends := make(chan error, n)
	for range n {
		go func() {
			_, err := lp.call("job", payload)
			ends <- err
		}()
	}
	return ends
}

// budgetMeter is a meter whose Core HWM budget is 1 MiB, for messages of maxMessage bytes.
func budgetMeter(t *testing.T, maxMessage int) *capacity.Meter {
	t.Helper()
	budget := uint64(1 << 20)
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{CoreHwmBudgetBytes: &budget}, maxMessage)
	require.NoError(t, err)
	return capacity.New(settings)
}

// jobMeter is a meter whose application job queue takes jobs at most, and its settings.
func jobMeter(t *testing.T, jobs uint64) (*capacity.Meter, capacity.Settings) {
	t.Helper()
	settings, err := capacity.Resolve(sdk.InboundDispatchOptions{
		ApplicationJobQueueProfile: sdk.ApplicationJobQueueProfileManual, MaxQueuedApplicationJobs: &jobs,
	}, transport.DefaultMaxMessageSize)
	require.NoError(t, err)
	return capacity.New(settings), settings
}

// jobPermit takes a job's permit of meter, as a Spot's lane takes it, for startLongPolls.
func jobPermit(meter *capacity.Meter) func(context.Context) (func(), error) {
	return func(ctx context.Context) (func(), error) {
		reserved, err := meter.Acquire(ctx, nil)
		return func() { meter.Return(reserved) }, err
	}
}

// giveUp gives up the long polls and waits until their cancellations have reached them.
func (lp *longPolls) giveUp(t *testing.T, giveUp func(), ended <-chan error, n int) {
	t.Helper()
	giveUp()
	for range n {
		require.ErrorIs(t, <-ended, context.Canceled)
	}
	require.Eventually(t, func() bool { return lp.polling.Load() == 0 }, 10*time.Second, time.Millisecond,
		"the cancellations reached the long polls")
}

// Calls that hold a stream's share and wait for their cancellations (long polls) get them: a
// stream that has waited StallTimeout for room reads on, refusing each request that finds
// none, so that the cancellations behind those requests reach the calls, which end and free
// the share; the stream then takes requests again.
func TestCancelsReachTheCallsThatHoldAStreamsShare(t *testing.T) {
	const maxMessage, payload = 256 << 10, 200 << 10
	lp := startLongPolls(t, budgetMeter(t, maxMessage), maxMessage, nil)

	giveUp, ended := lp.poll(2, payload) // they fill the stream's share
	require.Eventually(t, func() bool { return lp.polling.Load() == 2 }, 10*time.Second, time.Millisecond)
	_, err := lp.quick(payload)
	require.ErrorIs(t, err, sdk.ErrInboundBudget, "a third finds no room, and the stream waits for some")
	// Once it has waited in vain, it refuses at once each request that finds no room, however
	// many come before the cancellations: each of these would otherwise wait StallTimeout.
	within, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	refusals := make(chan error, 40)
	for range cap(refusals) {
		go func() {
			r, err := lp.a.Call(within, "b", &wire.Request{Method: "quick", Payload: make([]byte, payload)})
			if err == nil {
				err = wire.DecodeError(r.Error)
			}
			refusals <- err
		}()
	}
	for range cap(refusals) {
		require.ErrorIs(t, <-refusals, sdk.ErrInboundBudget)
	}

	lp.giveUp(t, giveUp, ended, 2)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := lp.quick(payload)
		assert.NoError(c, err)
	}, 10*time.Second, 10*time.Millisecond, "the stream has room, and takes requests again")
}

// Calls whose jobs hold the node's application job queue paused, and wait for their
// cancellations, get them: a stream that has waited StallTimeout for intake to resume reads
// on, refusing each request unrun (ErrCapacityExceeded{Scheduler}) while intake stays paused,
// so that the cancellations reach the calls, whose jobs end; intake then resumes.
func TestCancelsReachTheCallsThatHoldIntakePaused(t *testing.T) {
	const jobs = 2
	meter, _ := jobMeter(t, jobs)
	lp := startLongPolls(t, meter, transport.DefaultMaxMessageSize, jobPermit(meter))

	giveUp, ended := lp.poll(2, 0) // their jobs pause intake
	require.Eventually(t, func() bool { return lp.polling.Load() == 2 && meter.Paused() }, 10*time.Second, time.Millisecond)
	r, err := lp.quick(0)
	var ce *sdk.CapacityError
	require.ErrorAs(t, err, &ce, "refused once the stream has waited StallTimeout")
	assert.Equal(t, sdk.CapacityScheduler, ce.Where)
	require.NotNil(t, r)
	assert.True(t, r.Refused, "unrun")

	lp.giveUp(t, giveUp, ended, 2)
	require.Eventually(t, func() bool { return !meter.Paused() }, 10*time.Second, time.Millisecond, "intake resumed")

	// The stream holds nothing now: a later pause, of other jobs, is waited for, not shed.
	var held []bool
	for range jobs {
		reserved, err := meter.Acquire(context.Background(), nil)
		require.NoError(t, err)
		held = append(held, reserved)
	}
	require.True(t, meter.Paused())
	time.AfterFunc(800*time.Millisecond, func() { // past StallTimeout and the second check
		for _, reserved := range held {
			meter.Return(reserved)
		}
	})
	_, err = lp.quick(0)
	require.NoError(t, err, "taken once intake resumed")
}

// A stream whose calls end steadily, though slowly, while the job queue stays paused (intake
// resumes only after 16 jobs of 100 ms, past its StallTimeout of 1 s) is not in vain: a
// request that waits for intake is taken, not refused.
func TestAStreamWhoseCallsEndSteadilyWaitsForIntake(t *testing.T) {
	meter, settings := jobMeter(t, 80) // paused at 72, resumed at 56: after 16 jobs, 1.6 s
	lp := startLongPollsWith(t, meter, transport.DefaultMaxMessageSize, time.Second, jobPermit(meter))

	ended := lp.jobs(int(settings.PauseAt), 0)
	require.Eventually(t, meter.Paused, 10*time.Second, time.Millisecond)
	_, err := lp.quick(0)
	require.NoError(t, err, "taken once intake resumed")
	for range settings.PauseAt {
		require.NoError(t, <-ended)
	}
}

// Likewise for the stream's share: small calls that hold it end one every 100 ms, and room for
// a large request comes only after 15 of them, past its StallTimeout of 1 s. Of two large requests,
// the first is refused for room, and the second waits for it and is taken.
func TestAStreamWhoseCallsEndSteadilyWaitsForRoomInItsShare(t *testing.T) {
	const maxMessage, small, large = 256 << 10, 16 << 10, 250 << 10 // room after 15 jobs, 1.5 s
	lp := startLongPollsWith(t, budgetMeter(t, maxMessage), maxMessage, time.Second, nil)

	ended := lp.jobs(31, small) // they fill most of the share
	require.Eventually(t, func() bool { return lp.taken.Load() == 31 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, lp.refusedOfTwo(t, large), "the second large request waited for room, which came steadily")
	for range 31 {
		require.NoError(t, <-ended)
	}
}

// While a stream sheds, each cancellation is read at once, though the one before it ended a
// call: the stream sheds until none of its requests runs, not until the first of them ends.
func TestWhileAStreamShedsEveryCancellationIsReadAtOnce(t *testing.T) {
	const maxMessage, poll, large = 256 << 10, 160 << 10, 250 << 10
	const stall = 2 * time.Second
	lp := startLongPollsWith(t, budgetMeter(t, maxMessage), maxMessage, stall, nil)

	var giveUps []func()
	var ends []<-chan error
	for range 3 {
		giveUp, ended := lp.poll(1, poll)
		giveUps, ends = append(giveUps, giveUp), append(ends, ended)
	}
	require.Eventually(t, func() bool { return lp.polling.Load() == 3 }, 10*time.Second, time.Millisecond)
	_, err := lp.quick(large)
	require.ErrorIs(t, err, sdk.ErrInboundBudget)
	time.Sleep(stall*5/4 + 500*time.Millisecond) // the stream sheds from here
	for i := range 3 {
		if i < 2 { // with one long poll left, a large request fits
			_, err = lp.quick(large)
			require.ErrorIs(t, err, sdk.ErrInboundBudget, "no room yet: refused at once")
		}
		giveUps[i]()
		require.ErrorIs(t, <-ends[i], context.Canceled)
		require.Eventually(t, func() bool { return lp.polling.Load() == int64(2-i) }, stall/2, time.Millisecond,
			"cancellation %d read at once", i)
	}
}

// A request that fits while a stream sheds does not end the shedding: the calls it sheds for
// still wait for their cancellations, so the next request that finds no room leaves the stream
// read on, and the cancellations behind it reach their calls at once, not a StallTimeout later.
func TestARequestThatFitsWhileAStreamShedsDoesNotEndIt(t *testing.T) {
	const maxMessage, poll, large = 256 << 10, 160 << 10, 250 << 10
	const stall = 2 * time.Second
	lp := startLongPollsWith(t, budgetMeter(t, maxMessage), maxMessage, stall, nil)

	giveUp, ended := lp.poll(3, poll)
	require.Eventually(t, func() bool { return lp.polling.Load() == 3 }, 10*time.Second, time.Millisecond)
	_, err := lp.quick(large)
	require.ErrorIs(t, err, sdk.ErrInboundBudget)
	time.Sleep(stall*5/4 + 500*time.Millisecond) // the stream sheds from here
	_, err = lp.quick(0)
	require.NoError(t, err, "a small request fits")
	_, err = lp.quick(large)
	require.ErrorIs(t, err, sdk.ErrInboundBudget, "a large one does not")
	giveUp()
	for range 3 {
		require.ErrorIs(t, <-ended, context.Canceled)
	}
	require.Eventually(t, func() bool { return lp.polling.Load() == 0 }, stall/2, time.Millisecond,
		"the cancellations are read at once")
	_, err = lp.quick(large)
	require.NoError(t, err, "once the long polls have ended, a large request fits")
}

// While a stream sheds for a call that runs long, a request that finds no room is refused, and
// the stream, which has not waited for room for a StallTimeout, waits a short while (a quarter
// of the StallTimeout, a second at most) before it reads on: room that comes back that soon (a
// brief spike of the node's budget) is there for the next request, which is taken, not refused.
func TestWhileAStreamShedsABriefSpikeAfterARequestFitsIsWaitedFor(t *testing.T) {
	const maxMessage, stall = 256 << 10, 2 * time.Second
	meter := budgetMeter(t, maxMessage)
	lp := startLongPollsWith(t, meter, maxMessage, stall, nil)
	giveUp, ended := lp.poll(1, 0)
	defer func() { giveUp(); <-ended }()
	require.Eventually(t, func() bool { return lp.polling.Load() == 1 }, 10*time.Second, time.Millisecond)
	var others int64 // other streams' calls fill the node's budget
	for meter.Charge(4 << 10) {
		others += 4 << 10
	}
	_, err := lp.quick(maxMessage / 2)
	require.ErrorIs(t, err, sdk.ErrInboundBudget)
	time.Sleep(stall*5/4 + 500*time.Millisecond) // the stream sheds from here
	time.Sleep(stall)                            // and has not waited for room since
	meter.Release(others)
	_, err = lp.quick(0)
	require.NoError(t, err, "a request fits")
	require.True(t, meter.Charge(others))
	time.AfterFunc(stall/8, func() { meter.Release(others) })
	assert.Equal(t, 1, lp.refusedOfTwo(t, maxMessage/2), "the room that came back soon was waited for, and the second request took it")
}

// A peer whose backlog alternates small requests (which fit) and large ones (which do not)
// while its stream sheds: the reader waits a short while for room once a StallTimeout at most,
// not after each request that fits, so the cancellations behind k such pairs are read in less
// than a StallTimeout.
func TestAlternatingFitsAndMissesWhileAStreamShedsDoNotDelayItsCancellations(t *testing.T) {
	const maxMessage, poll, large = 256 << 10, 160 << 10, 250 << 10
	const stall = 2 * time.Second // short wait: 500 ms
	lp := startLongPollsWith(t, budgetMeter(t, maxMessage), maxMessage, stall, nil)
	giveUp, ended := lp.poll(3, poll)
	require.Eventually(t, func() bool { return lp.polling.Load() == 3 }, 10*time.Second, time.Millisecond)
	_, err := lp.quick(large)
	require.ErrorIs(t, err, sdk.ErrInboundBudget)
	time.Sleep(stall*5/4 + 500*time.Millisecond) // the stream sheds from here

	const pairs = 8
	done := make(chan error, 2*pairs)
	for range pairs { // queued in order behind each other
		go func() { _, err := lp.quick(0); done <- err }()
		time.Sleep(2 * time.Millisecond)
		go func() { _, err := lp.quick(large); done <- err }()
		time.Sleep(2 * time.Millisecond)
	}
	giveUp() // its cancellations come behind the backlog
	given := time.Now()
	for range 3 {
		require.ErrorIs(t, <-ended, context.Canceled)
	}
	require.Eventually(t, func() bool { return lp.polling.Load() == 0 }, 30*time.Second, time.Millisecond)
	took := time.Since(given)
	for range 2 * pairs {
		<-done
	}
	require.Less(t, took, stall, "the cancellations were read %v late, behind %d fit/miss pairs", took, pairs)
}

// A stream none of whose requests runs waits for room as long as it takes: the node's budget,
// full of other streams' calls, is waited for well past StallTimeout, and its requests are
// taken once it has room, not refused.
func TestAStreamThatRunsNothingWaitsForRoomAsLongAsItTakes(t *testing.T) {
	const maxMessage = 256 << 10
	meter := budgetMeter(t, maxMessage)
	lp := startLongPolls(t, meter, maxMessage, nil)
	budget := int64(meter.Settings().Budget)
	require.True(t, meter.Charge(budget)) // other streams' calls fill the node's budget
	_, err := lp.quick(0)
	require.ErrorIs(t, err, sdk.ErrInboundBudget, "the first finds no room, and the stream waits for some")
	time.Sleep(time.Second) // past StallTimeout and the second check
	time.AfterFunc(time.Second, func() { meter.Release(budget) })
	for i := range 3 {
		_, err := lp.quick(0)
		require.NoError(t, err, "request %d is taken once there is room", i)
	}
}

// The cancellations that come behind a request that waits for room are read while it waits,
// long before StallTimeout: the calls that hold the stream's share end, and the room comes.
func TestCancelsBehindARequestThatWaitsForRoomAreReadWhileItWaits(t *testing.T) {
	lp, giveUp, ended := waitingForRoom(t)
	lp.giveUp(t, giveUp, ended, 2) // within 10 s: a sixth of the stall
	_, err := lp.quick(roomPayload)
	require.NoError(t, err, "the stream has room again")
}

// roomPayload is the size of the requests of waitingForRoom: two fill a stream's share.
const roomPayload = 200 << 10

// waitingForRoom is a stream, with a StallTimeout of a minute, whose share two long polls
// fill: a third request has found no room, and the stream waits for some. It returns what
// gives the long polls up, and their ends.
func waitingForRoom(t *testing.T) (lp *longPolls, giveUp func(), ended <-chan error) {
	t.Helper()
	const maxMessage = 256 << 10
	lp = startLongPollsWith(t, budgetMeter(t, maxMessage), maxMessage, time.Minute, nil)
	giveUp, ended = lp.poll(2, roomPayload)
	require.Eventually(t, func() bool { return lp.polling.Load() == 2 }, 10*time.Second, time.Millisecond)
	_, err := lp.quick(roomPayload)
	require.ErrorIs(t, err, sdk.ErrInboundBudget, "a third finds no room, and the stream waits for some")
	return lp, giveUp, ended
}

// So are those behind a request that waits for the paused job queue: the calls whose jobs
// pause it end, intake resumes, and the request is taken.
func TestCancelsBehindARequestThatWaitsForIntakeAreReadWhileItWaits(t *testing.T) {
	meter, _ := jobMeter(t, 2)
	lp := startLongPollsWith(t, meter, transport.DefaultMaxMessageSize, time.Minute, jobPermit(meter))

	giveUp, ended := lp.poll(2, 0) // their jobs pause intake
	require.Eventually(t, func() bool { return lp.polling.Load() == 2 && meter.Paused() }, 10*time.Second, time.Millisecond)
	quick := make(chan error, 1)
	go func() { _, err := lp.quick(0); quick <- err }()
	time.Sleep(50 * time.Millisecond) // the request waits for intake; the cancellations come behind it

	lp.giveUp(t, giveUp, ended, 2) // within 10 s: a sixth of the stall
	require.NoError(t, <-quick, "taken once intake resumed")
}

// A cancellation read ahead before its call ran is kept for the reader; once that call runs
// and holds the room, and the stream waits for room again, the cancellation reaches it.
func TestACancellationReadAheadBeforeItsCallRanReachesItInTheNextWait(t *testing.T) {
	lp, giveUpFirst, endedFirst := waitingForRoom(t)     // and reads ahead
	giveUpSecond, endedSecond := lp.poll(3, roomPayload) // read ahead: they wait for room
	quick := make(chan error, 1)
	go func() { _, err := lp.quick(roomPayload); quick <- err }()
	time.Sleep(300 * time.Millisecond)
	giveUpSecond() // their cancellations, read ahead before the calls run, are kept
	time.Sleep(300 * time.Millisecond)
	// The first polls end: two of the second run, refusing the third and the quick call
	// unrun, and the stream waits for room again, with their cancellations read.
	lp.giveUp(t, giveUpFirst, endedFirst, 2)
	for range 3 {
		require.ErrorIs(t, <-endedSecond, context.Canceled)
	}
	require.Eventually(t, func() bool { return lp.polling.Load() == 0 }, 10*time.Second, time.Millisecond,
		"the cancellations reached the calls that ran after them")
	<-quick
}

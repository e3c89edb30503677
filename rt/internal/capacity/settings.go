// Package capacity is the process-level accounting of a node's inbound work (digest E1, E6,
// I4, J): the Core HWM, a byte budget for the payload that peers sent and the node still holds,
// and the application job queue, a bound on the application jobs queued or running across all
// Spots at once. Both are measured where the work passes — the transport's streams, the Spots'
// lanes — with atomic counters, and reported as the J status records.
//
// The per-Spot lane accounting (package exec) is a separate unit: its count and byte limits
// bound one Spot, the Core HWM bounds the process, and neither number is the other's limit.
package capacity

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"

	"github.com/zlink-go/zlink/sdk"
)

// MessageOverhead is what every inbound request costs the Core HWM beyond its payload, so
// that a flood of empty messages is bounded by bytes too.
const MessageOverhead = 256

// Request returns the Core HWM charge of a request with a payload of n bytes.
func Request(n int) int64 { return int64(n) + MessageOverhead }

// The budgets that the profiles give, as a fraction of the memory limit or, without one, as
// a fixed size.
const (
	balancedDivisor   = 4 // Balanced: a quarter of the memory limit
	throughputDivisor = 2 // Throughput: half of it
	lowMemoryDivisor  = 8 // LowMemory: an eighth

	balancedBudget   = 256 << 20
	throughputBudget = 1 << 30
	lowMemoryBudget  = 64 << 20
)

// The application job queue's defaults.
const (
	DefaultPauseThresholdPercent = 90
	// jobsPerProcessor and minJobs size the Auto profile: max(minJobs, jobsPerProcessor ×
	// GOMAXPROCS).
	jobsPerProcessor = 1024
	minJobs          = 4096
)

// Settings are the figures in force, resolved from the configured options.
type Settings struct {
	// Options are the options as configured.
	Options sdk.InboundDispatchOptions
	// MemoryLimit is the memory limit the budget was derived from: the configured one, else
	// GOMEMLIMIT; 0 when neither is set or an explicit budget was given.
	MemoryLimit uint64
	// Budget is the effective Core HWM in bytes.
	Budget int64
	// Processors is GOMAXPROCS when the settings were resolved.
	Processors int
	// MaxJobs is the application job queue's size; PauseAt and ResumeAt are the permit counts
	// at which inbound intake pauses and resumes.
	MaxJobs, PauseAt, ResumeAt int64
	// PausePercent and ResumePercent are the thresholds in force.
	PausePercent, ResumePercent uint32
}

// Resolve validates o and computes the settings in force. maxMessage is the node's largest
// payload: the budget must admit at least one message of that size. Every problem is reported
// at once, each wrapping sdk.ErrConfig.
//
// The effective budget is, in this order: CoreHwmBudgetBytes; else the memory limit
// (CoreHwmMemoryLimitBytes, else GOMEMLIMIT when set) divided by 4 (Balanced), 2 (Throughput)
// or 8 (LowMemory); else 256 MiB (Balanced), 1 GiB (Throughput) or 64 MiB (LowMemory). A
// derived budget is raised to two of the largest messages if it is smaller.
func Resolve(o sdk.InboundDispatchOptions, maxMessage int) (Settings, error) {
	var errs []error
	if err := o.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", sdk.ErrConfig, err))
	}
	s := Settings{Options: o, Processors: runtime.GOMAXPROCS(0)}
	largest := Request(maxMessage)

	switch {
	case o.CoreHwmBudgetBytes != nil:
		b := *o.CoreHwmBudgetBytes
		switch {
		case b > math.MaxInt64:
			errs = append(errs, fmt.Errorf("%w: CoreHwmBudgetBytes %d is too large", sdk.ErrConfig, b))
		case int64(b) < largest:
			errs = append(errs, fmt.Errorf("%w: CoreHwmBudgetBytes %d cannot admit one message of the largest size (%d bytes of payload and %d of overhead): give at least %d",
				sdk.ErrConfig, b, maxMessage, MessageOverhead, largest))
		default:
			s.Budget = int64(b)
		}
		if l := o.CoreHwmMemoryLimitBytes; l != nil && b > *l {
			errs = append(errs, fmt.Errorf("%w: CoreHwmBudgetBytes %d is over CoreHwmMemoryLimitBytes %d", sdk.ErrConfig, b, *l))
		}
	default:
		if l := o.CoreHwmMemoryLimitBytes; l != nil {
			if *l == 0 {
				errs = append(errs, fmt.Errorf("%w: CoreHwmMemoryLimitBytes is 0: leave it nil for GOMEMLIMIT or the profile's default", sdk.ErrConfig))
			}
			s.MemoryLimit = *l
		} else if gl := debug.SetMemoryLimit(-1); gl > 0 && gl < math.MaxInt64 {
			s.MemoryLimit = uint64(gl)
		}
		s.Budget = profileBudget(o.CoreHwmProfile, s.MemoryLimit)
		s.Budget = max(s.Budget, 2*largest)
	}
	if o.CoreHwmMemoryLimitBytes != nil && o.CoreHwmBudgetBytes != nil {
		s.MemoryLimit = *o.CoreHwmMemoryLimitBytes
	}

	switch o.ApplicationJobQueueProfile {
	case sdk.ApplicationJobQueueProfileManual:
		switch {
		case o.MaxQueuedApplicationJobs == nil:
			errs = append(errs, fmt.Errorf("%w: the Manual application job queue profile needs MaxQueuedApplicationJobs", sdk.ErrConfig))
		case *o.MaxQueuedApplicationJobs == 0:
			errs = append(errs, fmt.Errorf("%w: MaxQueuedApplicationJobs is 0: the queue would admit nothing", sdk.ErrConfig))
		case *o.MaxQueuedApplicationJobs > math.MaxInt32:
			errs = append(errs, fmt.Errorf("%w: MaxQueuedApplicationJobs %d is over %d", sdk.ErrConfig, *o.MaxQueuedApplicationJobs, math.MaxInt32))
		default:
			s.MaxJobs = int64(*o.MaxQueuedApplicationJobs)
		}
	default:
		if o.MaxQueuedApplicationJobs != nil {
			errs = append(errs, fmt.Errorf("%w: MaxQueuedApplicationJobs is set but the application job queue profile is %s: set the Manual profile to use it",
				sdk.ErrConfig, o.ApplicationJobQueueProfile))
		}
		s.MaxJobs = max(minJobs, jobsPerProcessor*int64(s.Processors))
	}

	s.PausePercent = o.ApplicationJobQueuePauseThresholdPercent
	if s.PausePercent == 0 {
		s.PausePercent = DefaultPauseThresholdPercent
	}
	s.ResumePercent = o.ApplicationJobQueueResumeThresholdPercent
	if s.ResumePercent == 0 {
		// Default: seven ninths of the pause threshold (90% → 70%).
		s.ResumePercent = s.PausePercent * 7 / 9
	} else if s.ResumePercent >= s.PausePercent && o.ApplicationJobQueuePauseThresholdPercent == 0 {
		errs = append(errs, fmt.Errorf("%w: application job queue resume threshold %d%% is not below the default pause threshold %d%%",
			sdk.ErrConfig, s.ResumePercent, s.PausePercent))
	}
	if s.MaxJobs > 0 {
		s.PauseAt = max(1, (s.MaxJobs*int64(s.PausePercent)+99)/100)
		s.ResumeAt = min(s.MaxJobs*int64(s.ResumePercent)/100, s.PauseAt-1)
	}
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// profileBudget is the budget that profile gives with memory limit limit (0: none).
func profileBudget(p sdk.CoreHwmProfile, limit uint64) int64 {
	div, fixed := uint64(balancedDivisor), int64(balancedBudget)
	switch p {
	case sdk.CoreHwmProfileThroughput:
		div, fixed = throughputDivisor, throughputBudget
	case sdk.CoreHwmProfileLowMemory:
		div, fixed = lowMemoryDivisor, lowMemoryBudget
	}
	if limit == 0 {
		return fixed
	}
	return int64(min(limit/div, math.MaxInt64))
}

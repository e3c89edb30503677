package admin

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// The /status document. Its field names are stable: docs/ADMIN.md lists them, and the golden
// test (testdata/status.golden.json) fails on any change. Enumerations are their names as the
// sdk spells them ("Serving", "Ready"); an absent optional value is null; times are RFC 3339;
// durations are seconds.

// Status is a node's status document.
type Status struct {
	Node               string         `json:"node"`
	Mesh               string         `json:"mesh"`
	ApplicationVersion int64          `json:"applicationVersion"`
	ObservedAt         time.Time      `json:"observedAt"`
	Runtime            RuntimeDoc     `json:"runtime"`
	Relocation         *RelocationDoc `json:"relocation"`
	MeshStatus         MeshDoc        `json:"meshStatus"`
	Channels           ChannelsDoc    `json:"channels"`
	Capacity           CapacityDoc    `json:"capacity"`
	Activity           ActivityDoc    `json:"activity"`
}

// RuntimeDoc is the runtime status (F11), without its capacity figures, which Capacity holds.
type RuntimeDoc struct {
	State             string                `json:"state"`
	IsReady           bool                  `json:"isReady"`
	AcceptingWork     bool                  `json:"acceptingWork"`
	Deadline          *time.Time            `json:"deadline"`
	RelocationResult  *RelocationResultDoc  `json:"relocationResult"`
	TerminationResult *TerminationResultDoc `json:"terminationResult"`
	SafeToShutdown    bool                  `json:"safeToShutdown"`
	Sequence          uint64                `json:"sequence"`
	ObservedAt        time.Time             `json:"observedAt"`
}

// RelocationResultDoc is a relocation's terminal result (F3).
type RelocationResultDoc struct {
	Mode                     string `json:"mode"`
	TargetApplicationVersion int64  `json:"targetApplicationVersion"`
	Outcome                  string `json:"outcome"`
	Reason                   string `json:"reason"`
}

// TerminationResultDoc is a shutdown's terminal result (F8).
type TerminationResultDoc struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

// RelocationDoc is the progress of the relocation in progress or the last one.
type RelocationDoc struct {
	Mode                     string               `json:"mode"`
	TargetApplicationVersion int64                `json:"targetApplicationVersion"`
	Running                  bool                 `json:"running"`
	Units                    int64                `json:"units"`
	Moved                    int64                `json:"moved"`
	Gone                     int64                `json:"gone"`
	Deadline                 time.Time            `json:"deadline"`
	Result                   *RelocationResultDoc `json:"result"`
}

// MeshDoc is the RouteMesh status (G3).
type MeshDoc struct {
	Name           string           `json:"name"`
	State          string           `json:"state"`
	IsReady        bool             `json:"isReady"`
	ReadyPeerCount int              `json:"readyPeerCount"`
	Channels       []MeshChannelDoc `json:"channels"`
	Peers          []PeerDoc        `json:"peers"`
	Placement      PlacementDoc     `json:"placement"`
	Sequence       uint64           `json:"sequence"`
	ObservedAt     time.Time        `json:"observedAt"`
}

// MeshChannelDoc is one channel's readiness in the mesh status.
type MeshChannelDoc struct {
	Name             string `json:"name"`
	IsReady          bool   `json:"isReady"`
	ReadyTargetCount int    `json:"readyTargetCount"`
}

// PeerDoc is a peer's state (G2).
type PeerDoc struct {
	Node              string  `json:"node"`
	State             string  `json:"state"`
	UnavailableReason *string `json:"unavailableReason"`
}

// PlacementDoc is the placement status (G5).
type PlacementDoc struct {
	IsAvailable       bool    `json:"isAvailable"`
	ActiveSpotCount   int     `json:"activeSpotCount"`
	ActiveActorCount  int     `json:"activeActorCount"`
	UnavailableReason *string `json:"unavailableReason"`
}

// ChannelsDoc holds the status of each channel the node knows (G6, G7).
type ChannelsDoc struct {
	ClientServer []ClientServerDoc `json:"clientServer"`
	Fanout       []FanoutDoc       `json:"fanout"`
}

// ClientServerDoc is a ClientServer channel's status (G6).
type ClientServerDoc struct {
	Name              string      `json:"name"`
	LocalRole         string      `json:"localRole"`
	State             string      `json:"state"`
	IsReady           bool        `json:"isReady"`
	ReadyTargetCount  int         `json:"readyTargetCount"`
	UnavailableReason *string     `json:"unavailableReason"`
	Targets           []TargetDoc `json:"targets"`
	Sequence          uint64      `json:"sequence"`
}

// TargetDoc is one server of a ClientServer channel.
type TargetDoc struct {
	Node              string  `json:"node"`
	Weight            int     `json:"weight"`
	State             string  `json:"state"`
	UnavailableReason *string `json:"unavailableReason"`
}

// FanoutDoc is a Fanout channel's status for this node's subscriber (G7).
type FanoutDoc struct {
	Name                string    `json:"name"`
	State               string    `json:"state"`
	IsReady             bool      `json:"isReady"`
	ReadyPublisherCount int       `json:"readyPublisherCount"`
	UnavailableReason   *string   `json:"unavailableReason"`
	Publishers          []PeerDoc `json:"publishers"`
	Sequence            uint64    `json:"sequence"`
}

// CapacityDoc is the capacity status (J1).
type CapacityDoc struct {
	MeasurementEpoch    uint64      `json:"measurementEpoch"`
	CoreHwm             CoreHwmDoc  `json:"coreHwm"`
	ApplicationJobQueue JobQueueDoc `json:"applicationJobQueue"`
}

// CoreHwmDoc is the Core HWM (J2).
type CoreHwmDoc struct {
	ConfiguredMemoryLimitBytes            *uint64 `json:"configuredMemoryLimitBytes"`
	ConfiguredBudgetBytes                 *uint64 `json:"configuredBudgetBytes"`
	ConfiguredProfile                     string  `json:"configuredProfile"`
	EffectiveBudgetBytes                  uint64  `json:"effectiveBudgetBytes"`
	TotalAppliedHwmBytes                  uint64  `json:"totalAppliedHwmBytes"`
	CoreQueueAccountedBytes               uint64  `json:"coreQueueAccountedBytes"`
	ApplicationAccountedBytes             uint64  `json:"applicationAccountedBytes"`
	CurrentAccountedBytes                 uint64  `json:"currentAccountedBytes"`
	ProvisionalAccountedBytes             uint64  `json:"provisionalAccountedBytes"`
	PeakAccountedBytes                    uint64  `json:"peakAccountedBytes"`
	CompletionCurrentAccountedBytes       uint64  `json:"completionCurrentAccountedBytes"`
	CompletionPeakAccountedBytes          uint64  `json:"completionPeakAccountedBytes"`
	CompletionPendingMessageCount         uint64  `json:"completionPendingMessageCount"`
	TotalMessagingAccountedBytes          uint64  `json:"totalMessagingAccountedBytes"`
	MonitorQueueAppliedHwmBytes           uint64  `json:"monitorQueueAppliedHwmBytes"`
	MonitorQueueAccountedBytes            uint64  `json:"monitorQueueAccountedBytes"`
	TotalInstanceAppliedHwmBytes          uint64  `json:"totalInstanceAppliedHwmBytes"`
	TotalInstanceAccountedBytes           uint64  `json:"totalInstanceAccountedBytes"`
	BlockedRatioPpm                       uint64  `json:"blockedRatioPpm"`
	ActiveDirectionalQueueCount           uint64  `json:"activeDirectionalQueueCount"`
	ActiveCompletionDirectionalQueueCount uint64  `json:"activeCompletionDirectionalQueueCount"`
	ActiveSendQueueCount                  uint64  `json:"activeSendQueueCount"`
	ActiveReceiveQueueCount               uint64  `json:"activeReceiveQueueCount"`
	OutstandingApplicationLeaseCount      uint64  `json:"outstandingApplicationLeaseCount"`
	RetiredQueueCount                     uint64  `json:"retiredQueueCount"`
	DeferredOriginCreditBytes             uint64  `json:"deferredOriginCreditBytes"`
}

// JobQueueDoc is the application job queue (J3).
type JobQueueDoc struct {
	ConfiguredProfile                 string  `json:"configuredProfile"`
	ConfiguredManualMax               *uint64 `json:"configuredManualMax"`
	ConfiguredPauseThresholdPercent   uint32  `json:"configuredPauseThresholdPercent"`
	ConfiguredResumeThresholdPercent  uint32  `json:"configuredResumeThresholdPercent"`
	EffectiveProcessorCount           uint64  `json:"effectiveProcessorCount"`
	EffectiveMaxQueuedApplicationJobs uint64  `json:"effectiveMaxQueuedApplicationJobs"`
	PausePermitCount                  uint64  `json:"pausePermitCount"`
	ResumePermitCount                 uint64  `json:"resumePermitCount"`
	ReservedSupplyPermits             uint64  `json:"reservedSupplyPermits"`
	QueuedApplicationJobs             uint64  `json:"queuedApplicationJobs"`
	PermitsInUse                      uint64  `json:"permitsInUse"`
	PeakPermitsInUse                  uint64  `json:"peakPermitsInUse"`
	CapacityWaiters                   uint64  `json:"capacityWaiters"`
	CapacityWaitCount                 uint64  `json:"capacityWaitCount"`
	CapacityWaitSeconds               float64 `json:"capacityWaitSeconds"`
	PressureState                     string  `json:"pressureState"`
	CurrentPauseSeconds               float64 `json:"currentPauseSeconds"`
}

// ActivityDoc counts the node's work.
type ActivityDoc struct {
	// Turns counts the messages that took a turn on the node since it started; the page
	// charts its rate as calls per second.
	Turns int64 `json:"turns"`
}

// Document returns s as the /status document.
func Document(s Snapshot) Status {
	rt := s.Runtime
	doc := Status{
		Node:               string(s.Node),
		Mesh:               s.Mesh,
		ApplicationVersion: s.ApplicationVersion,
		ObservedAt:         s.TakenAt.UTC(),
		Runtime: RuntimeDoc{
			State:             rt.State.String(),
			IsReady:           rt.IsReady,
			AcceptingWork:     rt.AcceptingWork,
			Deadline:          utcPtr(rt.Deadline),
			RelocationResult:  relocationResult(rt.RelocationResult),
			TerminationResult: terminationResult(rt.TerminationResult),
			SafeToShutdown:    rt.SafeToShutdown,
			Sequence:          rt.Sequence,
			ObservedAt:        rt.ObservedAt.UTC(),
		},
		MeshStatus: meshDoc(s.MeshStatus),
		Channels:   ChannelsDoc{ClientServer: []ClientServerDoc{}, Fanout: []FanoutDoc{}},
		Capacity:   capacityDoc(s.Capacity),
		Activity:   ActivityDoc{Turns: s.Turns},
	}
	doc.Relocation = relocationDoc(s.Relocation)
	for _, c := range s.ClientServer {
		cs := ClientServerDoc{
			Name: c.ChannelName, LocalRole: c.LocalRole.String(), State: c.State.String(), IsReady: c.IsReady,
			ReadyTargetCount: c.ReadyTargetCount, UnavailableReason: reason(c.UnavailableReason),
			Targets: []TargetDoc{}, Sequence: c.Sequence,
		}
		for _, t := range c.Targets {
			cs.Targets = append(cs.Targets, TargetDoc{Node: string(t.NodeRid), Weight: t.Weight, State: t.State.String(), UnavailableReason: reason(t.UnavailableReason)})
		}
		doc.Channels.ClientServer = append(doc.Channels.ClientServer, cs)
	}
	for _, f := range s.Fanout {
		doc.Channels.Fanout = append(doc.Channels.Fanout, FanoutDoc{
			Name: f.ChannelName, State: f.State.String(), IsReady: f.IsReady, ReadyPublisherCount: f.ReadyPublisherCount,
			UnavailableReason: reason(f.UnavailableReason), Publishers: peers(f.Publishers), Sequence: f.Sequence,
		})
	}
	return doc
}

func relocationDoc(r *Relocation) *RelocationDoc {
	if r == nil {
		return nil
	}
	return &RelocationDoc{
		Mode: r.Mode.String(), TargetApplicationVersion: r.TargetApplicationVersion, Running: r.Running,
		Units: r.Units, Moved: r.Moved, Gone: r.Gone, Deadline: r.Deadline.UTC(), Result: relocationResult(r.Result),
	}
}

func meshDoc(m sdk.RouteMeshStatus) MeshDoc {
	doc := MeshDoc{
		Name: m.MeshName, State: m.State.String(), IsReady: m.IsReady, ReadyPeerCount: m.ReadyPeerCount,
		Channels: []MeshChannelDoc{}, Peers: peers(m.Peers),
		Placement: PlacementDoc{
			IsAvailable: m.Placement.IsAvailable, ActiveSpotCount: m.Placement.ActiveSpotCount,
			ActiveActorCount: m.Placement.ActiveActorCount, UnavailableReason: reason(m.Placement.UnavailableReason),
		},
		Sequence: m.Sequence, ObservedAt: m.ObservedAt.UTC(),
	}
	for _, c := range m.Channels {
		doc.Channels = append(doc.Channels, MeshChannelDoc{Name: c.ChannelName, IsReady: c.IsReady, ReadyTargetCount: c.ReadyTargetCount})
	}
	return doc
}

func peers(ps []sdk.PeerStatus) []PeerDoc {
	out := make([]PeerDoc, 0, len(ps))
	for _, p := range ps {
		out = append(out, PeerDoc{Node: string(p.NodeRid), State: p.State.String(), UnavailableReason: reason(p.UnavailableReason)})
	}
	return out
}

func capacityDoc(c sdk.HostCapacityStatus) CapacityDoc {
	h, q := c.CoreHwm, c.ApplicationJobQueue
	return CapacityDoc{
		MeasurementEpoch: c.MeasurementEpoch,
		CoreHwm: CoreHwmDoc{
			ConfiguredMemoryLimitBytes: h.ConfiguredMemoryLimitBytes, ConfiguredBudgetBytes: h.ConfiguredBudgetBytes,
			ConfiguredProfile: h.ConfiguredProfile.String(), EffectiveBudgetBytes: h.EffectiveBudgetBytes,
			TotalAppliedHwmBytes: h.TotalAppliedHwmBytes, CoreQueueAccountedBytes: h.CoreQueueAccountedBytes,
			ApplicationAccountedBytes: h.ApplicationAccountedBytes, CurrentAccountedBytes: h.CurrentAccountedBytes,
			ProvisionalAccountedBytes: h.ProvisionalAccountedBytes, PeakAccountedBytes: h.PeakAccountedBytes,
			CompletionCurrentAccountedBytes: h.CompletionCurrentAccountedBytes, CompletionPeakAccountedBytes: h.CompletionPeakAccountedBytes,
			CompletionPendingMessageCount: h.CompletionPendingMessageCount, TotalMessagingAccountedBytes: h.TotalMessagingAccountedBytes,
			MonitorQueueAppliedHwmBytes: h.MonitorQueueAppliedHwmBytes, MonitorQueueAccountedBytes: h.MonitorQueueAccountedBytes,
			TotalInstanceAppliedHwmBytes: h.TotalInstanceAppliedHwmBytes, TotalInstanceAccountedBytes: h.TotalInstanceAccountedBytes,
			BlockedRatioPpm: h.BlockedRatioPpm, ActiveDirectionalQueueCount: h.ActiveDirectionalQueueCount,
			ActiveCompletionDirectionalQueueCount: h.ActiveCompletionDirectionalQueueCount, ActiveSendQueueCount: h.ActiveSendQueueCount,
			ActiveReceiveQueueCount: h.ActiveReceiveQueueCount, OutstandingApplicationLeaseCount: h.OutstandingApplicationLeaseCount,
			RetiredQueueCount: h.RetiredQueueCount, DeferredOriginCreditBytes: h.DeferredOriginCreditBytes,
		},
		ApplicationJobQueue: JobQueueDoc{
			ConfiguredProfile: q.ConfiguredProfile.String(), ConfiguredManualMax: q.ConfiguredManualMax,
			ConfiguredPauseThresholdPercent: q.ConfiguredPauseThresholdPercent, ConfiguredResumeThresholdPercent: q.ConfiguredResumeThresholdPercent,
			EffectiveProcessorCount: q.EffectiveProcessorCount, EffectiveMaxQueuedApplicationJobs: q.EffectiveMaxQueuedApplicationJobs,
			PausePermitCount: q.PausePermitCount, ResumePermitCount: q.ResumePermitCount, ReservedSupplyPermits: q.ReservedSupplyPermits,
			QueuedApplicationJobs: q.QueuedApplicationJobs, PermitsInUse: q.PermitsInUse, PeakPermitsInUse: q.PeakPermitsInUse,
			CapacityWaiters: q.CapacityWaiters, CapacityWaitCount: q.CapacityWaitCount,
			CapacityWaitSeconds: q.CapacityWaitDuration.Seconds(), PressureState: q.PressureState.String(),
			CurrentPauseSeconds: q.CurrentPauseDuration.Seconds(),
		},
	}
}

func relocationResult(r *sdk.RelocationResult) *RelocationResultDoc {
	if r == nil {
		return nil
	}
	return &RelocationResultDoc{Mode: r.Mode.String(), TargetApplicationVersion: r.TargetApplicationVersion, Outcome: r.Outcome.String(), Reason: r.Reason.String()}
}

func terminationResult(r *sdk.TerminationResult) *TerminationResultDoc {
	if r == nil {
		return nil
	}
	return &TerminationResultDoc{Outcome: r.Outcome.String(), Reason: r.Reason.String()}
}

func reason(r *sdk.TopologyReason) *string {
	if r == nil {
		return nil
	}
	s := r.String()
	return &s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// status serves GET /status: the node's snapshot as JSON.
func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Document(s.node.Snapshot()))
}

// writeJSON writes v as an indented JSON answer.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// ErrorDoc is the body of every refusal: one line that names the problem.
type ErrorDoc struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(ErrorDoc{Error: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

package catalog

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// The reconcile is the owner's side of B8 and D3 when the store's answers went missing: it
// compares this node's record of a Spot with its activation here and repairs whichever is
// wrong. A write whose outcome stayed unknown, a close the store fenced out, and a peer's
// message along a route to this node for a Spot it has no activation of each put the Spot's
// key on the list; the reconcile reads the record linearizably and then
//
//   - releases a record of this node's registration that no activation or creation here
//     stands for (the key becomes Missing, and the next intent call creates it afresh);
//   - ends, without writing the store, an activation whose record is gone or belongs to
//     another owner or incarnation (it owns nothing: C1);
//   - finishes the close of an activation whose record is Releasing by this node (a release
//     that took effect although its answer was lost).

// maxSuspects bounds the reconcile's list; keys reported beyond it are dropped, and reported
// again by the next message that meets them.
const maxSuspects = 4096

// suspects is the reconcile's list: each key once, however often it is reported. A key that
// does not fit makes the reconcile check every record of this node once the list is worked off.
type suspects struct {
	mu       sync.Mutex
	keys     map[store.SpotKey]struct{}
	overflow bool
	kick     chan struct{} // buffered 1
}

func (s *suspects) init() {
	s.keys = make(map[store.SpotKey]struct{})
	s.kick = make(chan struct{}, 1)
}

func (s *suspects) add(k store.SpotKey) {
	s.mu.Lock()
	if len(s.keys) < maxSuspects {
		s.keys[k] = struct{}{}
	} else if _, ok := s.keys[k]; !ok {
		s.overflow = true
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// take removes up to n keys from the list.
func (s *suspects) take(n int) []store.SpotKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.SpotKey, 0, min(n, len(s.keys)))
	for k := range s.keys {
		if len(out) == n {
			break
		}
		out = append(out, k)
		delete(s.keys, k)
	}
	return out
}

// takeOverflow reports, once, that keys were dropped since it was last asked.
func (s *suspects) takeOverflow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.overflow
	s.overflow = false
	return o
}

func (s *suspects) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// suspect puts key on the reconcile's list.
func (c *Catalog) suspect(key store.SpotKey) { c.suspects.add(key) }

// Suspect asks the reconcile to compare the record of the owned Spot t with its activation
// here: another node found it Creating or Releasing for longer than a creation or a close
// takes, so something may be left behind.
func (c *Catalog) Suspect(t sdk.Target) {
	if _, err := c.ownedType(t); err == nil {
		c.suspect(store.SpotKey{Type: t.Type(), ID: t.ID()})
	}
}

// reconcileRetry is the pause before keys whose record could not be read are tried again.
const reconcileRetry = time.Second

// reconcileLoop works through the reconcile's list until the catalog closes.
func (c *Catalog) reconcileLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.suspects.kick:
		}
		for c.ctx.Err() == nil {
			keys := c.suspects.take(64)
			if len(keys) == 0 {
				if c.suspects.takeOverflow() {
					c.listOwned()
					continue
				}
				break
			}
			var failed []store.SpotKey
			for _, k := range keys {
				ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
				err := c.reconcileKey(ctx, k)
				cancel()
				if err != nil && c.ctx.Err() == nil {
					failed = append(failed, k)
				}
			}
			c.stats.reconciled.Add(int64(len(keys) - len(failed)))
			if len(failed) > 0 {
				c.log.Debug("reconcile looks again at records it could not read or whose close was in progress", "spots", len(failed))
				select {
				case <-c.ctx.Done():
					return
				case <-time.After(reconcileRetry):
				}
				for _, k := range failed {
					c.suspects.add(k)
				}
			}
		}
	}
}

// errCloseInProgress: a close of the Spot was in progress when the reconcile looked; it looks
// again later.
var errCloseInProgress = errors.New("catalog: a close of the Spot is in progress")

// listOwned puts every record of this node's registration on the reconcile's list, a page at a
// time as the list drains: keys were dropped from a full list, so none is trusted to be there.
func (c *Catalog) listOwned() {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
	defer cancel()
	err := c.store.Owned(ctx, c.Owner(), func(k store.SpotKey) { c.suspects.add(k) })
	if err != nil && c.ctx.Err() == nil {
		c.log.Warn("reconcile could not list this node's records; it tries again", "err", err)
		c.suspects.mu.Lock()
		c.suspects.overflow = true
		c.suspects.mu.Unlock()
	}
}

// slotOf returns the activation of key here and whether a creation of it is in progress.
func (c *Catalog) slotOf(k spotKey) (ownedSpot, bool) {
	sh := c.slots.of(k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if sl := sh.m[k]; sl != nil {
		return sl.spot, sl.creating != nil
	}
	return nil, false
}

// reconcileKey compares key's record with this node's activation of it and repairs either side.
// The activation is looked at before and after the record is read: a creation or a close that
// touched the key meanwhile owns it, and the reconcile leaves it alone.
func (c *Catalog) reconcileKey(ctx context.Context, key store.SpotKey) error {
	k := spotKey{key.Type, key.ID}
	sp, creating := c.slotOf(k)
	if creating {
		return nil // the creation in progress owns the record
	}
	if sp != nil {
		a := sp.base()
		if !a.turnAllowed() {
			// Its owner lease ended: it ends here, whatever etcd can say now (C1).
			_, err := c.beginClose(context.Background(), sp, sdk.CloseOwnerLost, false)
			if errors.Is(err, errAlreadyClosed) {
				err = nil
			}
			return err
		}
		if a.pendingClose() != nil || a.current() != stateActive {
			// The close in progress owns the record; if it fails (a release whose answer was
			// lost), the record is looked at again once it has ended.
			return errCloseInProgress
		}
	}
	res, err := c.store.Lookup(ctx, key)
	if err != nil {
		return err
	}
	if now, creating := c.slotOf(k); now != sp || creating {
		return nil
	}
	if sp == nil {
		if res.State != store.StateMissing && res.Record.Owner == c.Owner() {
			return c.releaseLeaked(ctx, k, res.Record)
		}
		return nil
	}
	a := sp.base()
	if a.pendingClose() != nil || a.current() != stateActive {
		return nil
	}
	rec := sp.record()
	reason := sdk.CloseUnspecified
	switch {
	case res.State == store.StateMissing,
		res.Record.Owner != rec.Owner,
		res.Record.Incarnation != rec.Incarnation:
		// The record is no longer this activation's: it ends without touching the store.
		reason = sdk.CloseOwnerLost
	case res.Record.Revision < rec.Revision:
		return nil // read before this activation's own latest write
	case res.Record.Phase == store.PhaseReleasing:
		// A release of ours took effect although its answer was lost: the close goes on.
		sp.setRecord(res.Record)
		reason = closeReason(res.Record.ReleaseTag)
	default:
		sp.setRecord(res.Record)
		return nil
	}
	c.log.Warn("reconcile: the Spot's record and its activation here disagreed; the activation closes",
		"spot", key.Type, "id", key.ID, "reason", reason)
	if _, err := c.beginClose(context.Background(), sp, reason, false); err != nil && !errors.Is(err, errAlreadyClosed) {
		return err
	}
	return nil
}

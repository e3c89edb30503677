package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zlink-go/zlink/rt/internal/rttest"
)

// The registers' model for porcupine: one integer, Put, Get, Add and CompareAndSet. An
// operation whose outcome is unknown may have taken effect at any time after it was called, or
// never; porcupine explores both.

type regInput struct {
	method        string
	value, expect int64
}

type regOutput struct {
	unknown bool
	value   int64
	ok      bool
}

// registerModel is the register as a nondeterministic porcupine model.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{int64(0)} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int64), input.(regInput), output.(regOutput)
		var next int64
		applies := true
		switch in.method {
		case rttest.RegisterPut:
			next = in.value
		case rttest.RegisterGet:
			next, applies = s, false
		case rttest.RegisterAdd:
			next = s + in.value
		case rttest.RegisterCAS:
			next, applies = in.value, s == in.expect
			if !applies {
				next = s
			}
		}
		if out.unknown {
			if applies && next != s {
				return []any{s, next}
			}
			return []any{s}
		}
		switch in.method {
		case rttest.RegisterCAS:
			if out.ok != applies || out.value != next {
				return nil
			}
		default:
			if out.value != next {
				return nil
			}
		}
		return []any{next}
	},
	Equal: func(a, b any) bool { return a.(int64) == b.(int64) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		arg := ""
		switch in.method {
		case rttest.RegisterPut, rttest.RegisterAdd:
			arg = fmt.Sprint(in.value)
		case rttest.RegisterCAS:
			arg = fmt.Sprintf("%d→%d", in.expect, in.value)
		}
		if out.unknown {
			return fmt.Sprintf("%s(%s) → ?", in.method, arg)
		}
		if in.method == rttest.RegisterCAS {
			return fmt.Sprintf("%s(%s) → %v, %d", in.method, arg, out.ok, out.value)
		}
		return fmt.Sprintf("%s(%s) → %d", in.method, arg, out.value)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(int64)) },
}

// History turns one object's operations into porcupine's form: answered operations with their
// times, writes of unknown outcome as possibly applied from their call on, and nothing of the
// refused ones, which did not take effect.
func History(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.OneWay {
			continue // a Touch changes nothing
		}
		in := regInput{method: op.Method, value: op.Input.GetValue(), expect: op.Input.GetExpect()}
		switch op.Outcome {
		case OK:
			out = append(out, porcupine.Operation{
				ClientId: op.Client, Input: in, Call: op.Call.UnixNano(), Return: op.Return.UnixNano(),
				Output: regOutput{value: op.Output.GetValue(), ok: op.Output.GetOk()},
			})
		case Unknown:
			if op.Method == rttest.RegisterGet {
				continue // a read that did not answer changed nothing
			}
			out = append(out, porcupine.Operation{
				ClientId: op.Client, Input: in, Call: op.Call.UnixNano(), Return: math.MaxInt64,
				Output: regOutput{unknown: true},
			})
		}
	}
	return out
}

// CheckLinearizable checks every object's history, each within timeout. A history that is not
// linearizable, or could not be shown to be in time, counts against the run; for each, the
// visualization of porcupine is written to dir (when set) and named in the failures.
func CheckLinearizable(r *Result, ops []Op, timeout time.Duration, dir string) {
	byObject := map[string][]Op{}
	for _, op := range ops {
		byObject[op.Object] = append(byObject[op.Object], op)
	}
	names := make([]string, 0, len(byObject))
	for name := range byObject {
		names = append(names, name)
	}
	sort.Strings(names)
	model := registerModel.ToModel()
	for _, name := range names {
		h := History(byObject[name])
		r.Objects++
		r.LinOps += len(h)
		res, info := porcupine.CheckOperationsVerbose(model, h, timeout)
		if res == porcupine.Ok {
			continue
		}
		r.NotLinearizable++
		where := ""
		if dir != "" {
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.html", r.Scenario, name))
			if err := os.MkdirAll(dir, 0o755); err == nil {
				if f, err := os.Create(path); err == nil {
					if porcupine.Visualize(model, info, f) == nil {
						where = " (see " + path + ")"
					}
					_ = f.Close()
				}
			}
		}
		r.failf("%s: history of %d operations is %s%s", name, len(h), res, where)
	}
}

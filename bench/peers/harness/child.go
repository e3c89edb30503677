package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/zlink-go/zlink/bench/peers/paside"
	"github.com/zlink-go/zlink/bench/peers/workload"
	"github.com/zlink-go/zlink/bench/peers/zlside"
)

// Framework names one of the two frameworks.
type Framework string

// The frameworks, in the order every round runs them.
const (
	ZLink      Framework = "zlink"
	ProtoActor Framework = "protoactor"
)

// Frameworks lists both in round order (A B).
var Frameworks = []Framework{ZLink, ProtoActor}

// resultPrefix starts the line on which a child reports its result.
const resultPrefix = "result "

// RunChild runs one workload of one framework in this process and writes its result to out as
// a "result <json>" line. With cpuProfile set, it writes a CPU profile of the run there. It
// does not stop the framework afterwards: the child process exits right after.
func RunChild(ctx context.Context, fw Framework, p workload.Params, cpuProfile string, out io.Writer) error {
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := Execute(ctx, fw, p)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s%s\n", resultPrefix, b)
	return err
}

// Execute runs one workload of one framework in this process and leaves it running; the
// returned result is the run's measurement.
func Execute(ctx context.Context, fw Framework, p workload.Params) (workload.Result, error) {
	var (
		res workload.Result
		err error
	)
	workload.SetPeers(p.Peers)
	switch fw {
	case ZLink:
		res, _, err = zlside.Run(ctx, p)
	case ProtoActor:
		res, _, err = paside.Run(ctx, p)
	default:
		err = fmt.Errorf("unknown framework %q", fw)
	}
	return res, err
}

package sdk

import (
	"context"
	"fmt"
	"sync/atomic"
)

// DefaultDiagnosticsLevel is the level a process starts with: Normal. Telemetry goes to the
// OpenTelemetry providers the runtime is given (by default the global ones, which record nothing
// until the application installs a provider), so the default costs next to nothing until the
// application asks for telemetry.
const DefaultDiagnosticsLevel = DiagnosticsLevelNormal

// diagnosticsLevel is the process's level. It holds the level XOR DefaultDiagnosticsLevel, so
// that its zero value is the default without an init function. One atomic load reads it (I3).
var diagnosticsLevel atomic.Uint32

// SetDiagnosticsLevel sets the process's diagnostics level, for every node of the process. The
// change is atomic and waits for no message: processing that started before it keeps the level
// it started with, and processing that starts after it uses the new one; nothing already done
// is recorded again. An unknown level or a nil ctx is refused with an error wrapping
// ErrInvalidArgument and changes nothing, and so does a ctx that has already ended (its error
// is returned).
func SetDiagnosticsLevel(ctx context.Context, level DiagnosticsLevel) error {
	// I3: this is the canonical setter; SetDiagnosticsLevelSync bridges to it.
	if ctx == nil {
		return fmt.Errorf("%w: SetDiagnosticsLevel needs a context, got nil (context.Background() when there is none)", ErrInvalidArgument)
	}
	if int(level) >= len(diagnosticsLevelNames) {
		return fmt.Errorf("%w: unknown diagnostics level %s", ErrInvalidArgument, level)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	diagnosticsLevel.Store(uint32(level ^ DefaultDiagnosticsLevel))
	return nil
}

// SetDiagnosticsLevelSync is SetDiagnosticsLevel for code without a context: it sets the
// process's diagnostics level at once, or refuses an unknown level with an error wrapping
// ErrInvalidArgument. Handlers use SetDiagnosticsLevel with their context.
func SetDiagnosticsLevelSync(level DiagnosticsLevel) error {
	return SetDiagnosticsLevel(context.Background(), level)
}

// CurrentDiagnosticsLevel returns the process's diagnostics level in force: DefaultDiagnosticsLevel
// until SetDiagnosticsLevel changes it. Reading it allocates nothing.
func CurrentDiagnosticsLevel() DiagnosticsLevel {
	return DiagnosticsLevel(diagnosticsLevel.Load()) ^ DefaultDiagnosticsLevel
}

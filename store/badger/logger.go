package badger

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	badgerdb "github.com/dgraph-io/badger/v4"
)

var _ badgerdb.Logger = slogAdapter{}

// levelBadgerDebug sits below slog Debug: Badger logs several DEBUG lines per
// write, which would drown an operator's Debug output.
const levelBadgerDebug = slog.LevelDebug - 4

// slogAdapter implements badgerdb.Logger on a *slog.Logger.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Errorf(f string, v ...any)   { a.log(slog.LevelError, f, v) }
func (a slogAdapter) Warningf(f string, v ...any) { a.log(slog.LevelWarn, f, v) }
func (a slogAdapter) Infof(f string, v ...any)    { a.log(slog.LevelDebug, f, v) }
func (a slogAdapter) Debugf(f string, v ...any)   { a.log(levelBadgerDebug, f, v) }

func (a slogAdapter) log(level slog.Level, f string, v []any) {
	ctx := context.Background()
	if !a.l.Enabled(ctx, level) {
		return // skip formatting lines nobody reads
	}
	msg := strings.TrimRight(fmt.Sprintf(f, v...), "\n")
	a.l.Log(ctx, level, msg, slog.String("component", "badger"))
}

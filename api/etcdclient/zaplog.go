package etcdclient

import (
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns the etcd client's logger: nothing below error (its
// warnings repeat every retry; the component logs the cause itself), errors
// to log at warn, and nothing at all when log is nil.
func zapToSlog(log *slog.Logger) *zap.Logger {
	if log == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{log: log.With("component", "etcd-client")})
}

type slogCore struct {
	log *slog.Logger
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.ErrorLevel }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log.With(attrs(fs)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	c.log.Warn(e.Message, attrs(fs)...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func attrs(fs []zapcore.Field) []any {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fs {
		f.AddTo(enc)
	}
	out := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		out = append(out, k, v)
	}
	return out
}

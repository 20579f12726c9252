// Package dashboard is lbscheduler's live web dashboard, served under /ui/
// on the API address: the W matrix per backend cluster, the rollout of every
// proxy, the health of every sub-cluster and instance and each row's
// explanation, from plain HTML, CSS and JavaScript embedded in the binary.
//
// One Dashboard per scheduler keeps the current document (Doc), rebuilt
// when the scheduler's plan changes (Notify) and when its own watches (proxy
// status reports, last-seen records, the leader's scheduler status, the
// current/ pointers, the staged rollout records and the demand reports of the traffic charts; list+watch
// like the inventory's) see an event; every
// browser tab follows it through one server-sent-events stream, so tabs add
// no etcd load.
//
//	GET  /ui/             the page (and its assets)
//	GET  /ui/api/state    the current Doc (JSON)
//	GET  /ui/events       server-sent events: "state" with a Doc whenever it changes
//	GET  /ui/api/history?proxy_cluster=B            the kept versions (metadata)
//	GET  /ui/api/diff?proxy_cluster=B&from=N&to=M  the rows that differ between two versions
//	POST /ui/api/action   an operator action (needs the API token; see actions.go)
package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/inventory"
)

//go:embed assets
var assets embed.FS

// Options configure a Dashboard.
type Options struct {
	// Client reads status/ and current/ (and writes actions).
	Client *clientv3.Client
	Layout keys.Layout
	// Inputs returns the scheduler's current inputs and computed rows, and
	// whether they are complete yet.
	Inputs func() (Inputs, bool)
	// Snapshots serves the version history and diffs.
	Snapshots Snapshots
	// Token is the API token; without one the dashboard is read-only.
	Token string
	// Refresh rebuilds the document this often even without events, so that
	// statuses turn STALE by the clock (default 5s).
	Refresh time.Duration
	// Sample is how often the traffic series take a point (default 5s;
	// 15 minutes of points are kept).
	Sample time.Duration
	// Heartbeat is the SSE keep-alive comment interval (default 15s).
	Heartbeat    time.Duration
	StallTimeout time.Duration
	Now          func() time.Time
	Logger       *slog.Logger
}

// Dashboard is one scheduler's dashboard; see the package comment.
type Dashboard struct {
	o    Options
	poke chan struct{}
	quit chan struct{}

	mu      sync.Mutex
	ptrs    live
	sts     statuses
	seen    statuses                // last-seen records (GONE proxies)
	sched   *report.SchedulerStatus // nil: no scheduler is leading
	started map[string]startedAt    // per proxy cluster: when its live version was published
	staged  map[string]rs.Staged    // per proxy cluster: its staged rollout record
	tr      traffic
	seq     uint64
	body    []byte // the current Doc as JSON (one line)
	content []byte // the same without Seq, to skip unchanged rebuilds
	changed chan struct{}
}

// New returns a dashboard; Run feeds it, Handler serves it.
func New(o Options) *Dashboard {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Sample <= 0 {
		o.Sample = sampleEvery
	}
	return &Dashboard{o: o, poke: make(chan struct{}, 1), quit: make(chan struct{}), ptrs: live{}, sts: statuses{}, seen: statuses{}, started: map[string]startedAt{}, staged: map[string]rs.Staged{}, changed: make(chan struct{}),
		tr: traffic{reports: map[string]report.Demand{}, series: map[seriesKey][]TrafficPoint{}, inflight: map[instKey]int64{}, keep: int(window / sampleEvery)}}
}

// Notify tells the dashboard the scheduler's inputs or plan changed.
func (d *Dashboard) Notify() {
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

// Run watches status/, last-seen/, the scheduler status, current/ and demand/, samples the traffic and rebuilds the document on every
// change until ctx is done; open event streams end then too.
func (d *Dashboard) Run(ctx context.Context) {
	defer close(d.quit)
	stPrefix, _ := d.o.Layout.StatusPrefix("")
	seenPrefix, _ := d.o.Layout.LastSeenPrefix("")
	var wg sync.WaitGroup
	for _, w := range []struct {
		prefix string
		sink   inventory.PrefixSink
	}{
		{stPrefix, d.proxySink(&d.sts, d.o.Layout.ParseStatus, "proxy status")},
		{seenPrefix, d.proxySink(&d.seen, d.o.Layout.ParseLastSeen, "last-seen record")},
		{d.o.Layout.SchedulerStatus(), d.schedulerSink()},
		{d.o.Layout.CurrentPrefix(), d.pointerSink()},
		{d.o.Layout.DemandPrefix(), d.demandSink()},
		{d.o.Layout.RolloutPrefix(), d.stagedSink()},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inventory.WatchPrefix(ctx, d.o.Client, w.prefix, w.sink, d.o.StallTimeout, d.o.Logger.With("component", "dashboard"))
		}()
	}
	defer wg.Wait()
	// The clock alone turns a status STALE: rebuild at the next such
	// moment, and at least every Refresh.
	tick := time.NewTimer(d.o.Refresh)
	defer tick.Stop()
	sample := time.NewTicker(d.o.Sample)
	defer sample.Stop()
	d.rebuild()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.poke:
		case <-tick.C:
		case <-sample.C:
			in, _ := d.o.Inputs()
			d.mu.Lock()
			d.tr.sampleLocked(d.o.Now(), in.Rows)
			d.mu.Unlock()
		}
		d.learnStarted(ctx)
		d.rebuild()
		d.mu.Lock()
		wait := nextFlip(d.recordsLocked(), d.o.Now(), d.o.Refresh)
		d.mu.Unlock()
		tick.Reset(wait)
	}
}

// rebuild assembles the document and wakes the streams if it changed.
func (d *Dashboard) rebuild() {
	in, ok := d.o.Inputs()
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := d.recordsLocked()
	rec.proxies = proxiesViews(d.tr.reports, d.tr.inflight)
	doc := build(in, ok, d.ptrs, rec, d.o.Token != "", d.o.Now())
	doc.Traffic = d.tr.listLocked()
	content, err := json.Marshal(doc)
	if err != nil {
		d.o.Logger.Error("dashboard document", "err", err)
		return
	}
	if bytes.Equal(content, d.content) {
		return
	}
	d.seq++
	doc.Seq = d.seq
	body, _ := json.Marshal(doc)
	d.body, d.content = body, content
	close(d.changed)
	d.changed = make(chan struct{})
}

// current returns the document, its sequence number and a channel closed
// when the next one is ready.
func (d *Dashboard) current() ([]byte, uint64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.body, d.seq, d.changed
}

// Handler serves /ui/ (mount it at "/ui/"). GETs need no token.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/ui/", http.FileServerFS(static))
	mux.Handle("GET /ui/", files)
	mux.HandleFunc("GET /ui/api/state", d.state)
	mux.HandleFunc("GET /ui/events", d.events)
	mux.HandleFunc("GET /ui/api/history", d.history)
	mux.HandleFunc("GET /ui/api/diff", d.diff)
	mux.HandleFunc("POST /ui/api/action", d.action)
	return secureHeaders(mux)
}

func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (d *Dashboard) state(w http.ResponseWriter, r *http.Request) {
	body, _, _ := d.current()
	if body == nil {
		http.Error(w, "dashboard: not ready yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

// events streams the document: at once, then on every change.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Time{})
	if err := rc.Flush(); err != nil {
		return
	}
	hb := time.NewTicker(d.o.Heartbeat)
	defer hb.Stop()
	var sent uint64
	for {
		body, seq, next := d.current()
		if body != nil && seq != sent {
			if _, err := w.Write([]byte("event: state\ndata: ")); err != nil {
				return
			}
			w.Write(body)
			if _, err := w.Write([]byte("\n\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent = seq
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.quit:
			return
		case <-next:
		case <-hb.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// sink applies one watched prefix to the dashboard under its lock: clear
// before a full listing, put per key-value, del per deleted key; every batch
// then asks for a rebuild.
type sink struct {
	d     *Dashboard
	clear func()
	put   func(kv *mvccpb.KeyValue)
	del   func(key string)
}

func (s *sink) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	s.d.mu.Lock()
	s.clear()
	for _, kv := range kvs {
		s.put(kv)
	}
	s.d.mu.Unlock()
	s.d.Notify()
}

func (s *sink) Apply(evs []*clientv3.Event, _ int64) {
	s.d.mu.Lock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			s.del(string(ev.Kv.Key))
		} else {
			s.put(ev.Kv)
		}
	}
	s.d.mu.Unlock()
	s.d.Notify()
}

func (s *sink) Heard(int64) {}

// proxySink keeps proxy status reports (status/<pc>/<id>) or last-seen
// records (last-seen/<pc>/<id>) in *m.
func (d *Dashboard) proxySink(m *statuses, parse func(string) (keys.ProxyKey, error), what string) *sink {
	return &sink{d: d,
		clear: func() { *m = statuses{} },
		del:   func(key string) { delete(*m, key) },
		put: func(kv *mvccpb.KeyValue) {
			pk, err := parse(string(kv.Key))
			var st report.ProxyStatus
			if err == nil {
				err = codec.UnmarshalJSON(kv.Value, &st)
			}
			if err != nil {
				d.o.Logger.Warn("dashboard: "+what+" ignored", "key", string(kv.Key), "err", err)
				delete(*m, string(kv.Key))
				return
			}
			st.ProxyCluster, st.ID = pk.ProxyCluster, pk.ProxyID
			(*m)[string(kv.Key)] = st
		},
	}
}

// schedulerSink keeps the leader's status (keys.Layout.SchedulerStatus,
// bound to the leader's lease: absent, no scheduler is leading).
func (d *Dashboard) schedulerSink() *sink {
	key := d.o.Layout.SchedulerStatus()
	return &sink{d: d,
		clear: func() { d.sched = nil },
		del: func(k string) {
			if k == key {
				d.sched = nil
			}
		},
		put: func(kv *mvccpb.KeyValue) {
			if string(kv.Key) != key {
				return
			}
			var st report.SchedulerStatus
			if err := codec.UnmarshalJSON(kv.Value, &st); err != nil {
				d.o.Logger.Warn("dashboard: scheduler status ignored", "key", key, "err", err)
				d.sched = nil
				return
			}
			d.sched = &st
		},
	}
}

// pointerSink keeps the live pointers (current/<pc>).
func (d *Dashboard) pointerSink() *sink {
	return &sink{d: d,
		clear: func() { d.ptrs = live{} },
		del: func(key string) {
			if pc, err := d.o.Layout.ParseCurrent(key); err == nil {
				delete(d.ptrs, pc)
			}
		},
		put: func(kv *mvccpb.KeyValue) {
			pc, err := d.o.Layout.ParseCurrent(string(kv.Key))
			var p snapshot.Pointer
			if err == nil {
				err = codec.UnmarshalJSON(kv.Value, &p)
			}
			if err != nil {
				d.o.Logger.Warn("dashboard: snapshot pointer ignored", "key", string(kv.Key), "err", err)
				return
			}
			d.ptrs[pc] = p
		},
	}
}

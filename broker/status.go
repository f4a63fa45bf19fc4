package broker

import (
	"slices"
	"strings"
	"time"

	"acpbroker/pool"
)

// Status is what a running broker is doing, as `broker status` shows it
// (and as its --json gives it). Durations are in seconds.
type Status struct {
	Version string    `json:"version"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// UptimeSeconds is how long the broker has run.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Platforms are the chat platforms served, in chat.platform's order.
	Platforms []PlatformStatus `json:"platforms"`
	Pool      PoolStatus       `json:"pool"`
	// Hosts are the agent hosts of the cluster the broker knows, by name
	// (none without [cluster]).
	Hosts []HostStatus `json:"hosts,omitempty"`
	// Threads are those with a live agent or a turn running or queued,
	// by id.
	Threads []ThreadStatus `json:"threads"`
}

// PlatformStatus is one chat platform: whether it is connected and takes
// messages, and if not, why.
type PlatformStatus struct {
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Problem   string `json:"problem,omitempty"`
}

// PoolStatus is the pool of agents against its limits.
type PoolStatus struct {
	// Live agents, of which Busy run a turn; Starting and Stopping hold
	// slots too. Max is pool.max_sessions.
	Live     int `json:"live"`
	Busy     int `json:"busy"`
	Starting int `json:"starting"`
	Stopping int `json:"stopping"`
	Max      int `json:"max"`
	// Waiting counts the prompts waiting for an agent slot; Queued
	// those waiting behind their thread's running turn.
	Waiting  int             `json:"waiting"`
	Queued   int             `json:"queued"`
	Profiles []ProfileStatus `json:"profiles"`
}

// HostStatus is one agent host: its labels and profiles, its agents
// against its capacity, its memory, and when it was last heard.
type HostStatus struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels,omitempty"`
	Profiles []string          `json:"profiles"`
	// Capacity is the agents it may run; Running those it runs, for any
	// broker; Agents those it runs for this one.
	Capacity int `json:"capacity"`
	Running  int `json:"running"`
	Agents   int `json:"agents"`
	// MemoryBytes and MemoryAvailableBytes are its machine's (0:
	// unknown).
	MemoryBytes          uint64 `json:"memory_bytes,omitempty"`
	MemoryAvailableBytes uint64 `json:"memory_available_bytes,omitempty"`
	// SilentSeconds is how long since it was last heard; Lost is set
	// once that passed cluster.host_timeout.
	SilentSeconds float64 `json:"silent_seconds"`
	Lost          bool    `json:"lost,omitempty"`
}

// ProfileStatus is one agent profile's agents against its limit (Max, 0:
// only the pool's).
type ProfileStatus struct {
	Name     string `json:"name"`
	Default  bool   `json:"default,omitempty"`
	Removed  bool   `json:"removed,omitempty"`
	Live     int    `json:"live"`
	Busy     int    `json:"busy"`
	Starting int    `json:"starting"`
	Waiting  int    `json:"waiting"`
	Max      int    `json:"max"`
}

// ThreadStatus is one thread: where it is, who started it, its agent and
// its turn.
type ThreadStatus struct {
	// ID is the broker's ("discord:1234…"); Platform and Thread its
	// parts.
	ID       string `json:"id"`
	Platform string `json:"platform"`
	Thread   string `json:"thread"`
	// Channel is where the thread was opened, Starter who started it, as
	// the platform's ids ("" where the platform does not say).
	Channel string `json:"channel,omitempty"`
	Starter string `json:"starter,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Agent is its live agent, nil without one.
	Agent *AgentStatus `json:"agent,omitempty"`
	// Turn is its running turn, nil without one.
	Turn *TurnStatus `json:"turn,omitempty"`
	// Queued counts its prompts waiting behind the running turn.
	Queued int `json:"queued"`
}

// AgentStatus is a thread's agent process and what it uses, as the
// kernel counts it (see pool.Usage).
type AgentStatus struct {
	PID int `json:"pid"`
	// Host is the agent host it runs on ("": this machine); PID is then
	// the host's.
	Host string `json:"host,omitempty"`
	// TakenOver: an earlier run of the broker started it (on an agent
	// host), and this one took it over.
	TakenOver     bool      `json:"taken_over,omitempty"`
	Session       string    `json:"session"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// MemoryBytes is the memory it holds; MemoryMaxBytes its limit (0:
	// none). CPUSeconds is its CPU time, nil where nothing counts it.
	MemoryBytes    int64    `json:"memory_bytes"`
	MemoryMaxBytes int64    `json:"memory_max_bytes,omitempty"`
	CPUSeconds     *float64 `json:"cpu_seconds,omitempty"`
	// Accounting is where those come from: "cgroup" or "proc"; "" with
	// UsageError when they could not be read.
	Accounting string `json:"accounting,omitempty"`
	UsageError string `json:"usage_error,omitempty"`
}

// TurnStatus is a running turn: what it is doing (an adapter.TurnState)
// and since when.
type TurnStatus struct {
	State      string    `json:"state"`
	Started    time.Time `json:"started"`
	AgeSeconds float64   `json:"age_seconds"`
}

// Status describes what the broker is doing now. Safe to call from any
// goroutine while the broker serves; it waits on no agent.
func (b *Broker) Status() Status {
	now := time.Now()
	s := Status{Version: b.opts.Version, PID: b.pid, Started: b.started, UptimeSeconds: now.Sub(b.started).Seconds()}
	for _, p := range b.chats {
		ps := PlatformStatus{Name: p.name}
		select {
		case <-p.Ready():
			if err := p.Healthy(); err != nil {
				ps.Problem = err.Error()
			} else {
				ps.Connected = true
			}
		default:
			ps.Problem = "not connected yet"
		}
		s.Platforms = append(s.Platforms, ps)
	}

	es := b.engine.Stats()
	st := es.Pool
	s.Pool = PoolStatus{Live: st.Live, Busy: st.Busy, Starting: st.Starting, Stopping: st.Stopping, Max: st.MaxSessions,
		Waiting: st.Waiting, Queued: es.Queued, Profiles: []ProfileStatus{}}
	for _, name := range sortedKeys(st.Profiles) {
		ps := st.Profiles[name]
		s.Pool.Profiles = append(s.Pool.Profiles, ProfileStatus{Name: name, Default: name == st.DefaultProfile, Removed: ps.Removed,
			Live: ps.Live, Busy: ps.Busy, Starting: ps.Starting, Waiting: ps.Waiting, Max: ps.MaxSessions})
	}

	if b.cluster != nil {
		for _, h := range b.cluster.Hosts() {
			s.Hosts = append(s.Hosts, HostStatus{Name: h.Name, Labels: h.Labels, Profiles: h.Profiles, Capacity: h.Capacity,
				Running: h.Running, Agents: h.Agents, MemoryBytes: h.MemTotal, MemoryAvailableBytes: h.MemAvailable,
				SilentSeconds: now.Sub(h.LastHeard).Seconds(), Lost: h.Lost})
		}
		slices.SortFunc(s.Hosts, func(a, b HostStatus) int { return strings.Compare(a.Name, b.Name) })
	}

	live := b.pool.Agents()
	usages, errs := pool.Usages(live)
	agents := map[string]agentUsage{}
	ids := b.engine.Threads()
	for i, a := range live {
		agents[a.Thread] = agentUsage{a, usages[i], errs[i]}
		if !slices.Contains(ids, a.Thread) {
			ids = append(ids, a.Thread)
		}
	}
	slices.Sort(ids)
	s.Threads = make([]ThreadStatus, 0, len(ids))
	for _, id := range ids {
		s.Threads = append(s.Threads, b.threadStatus(id, agents[id], now))
	}
	return s
}

// agentUsage is a live agent and what it uses, or why that is not
// known.
type agentUsage struct {
	*pool.Agent
	usage pool.Usage
	err   error
}

// threadStatus describes thread id, whose live agent is a (none: a.Agent
// nil).
func (b *Broker) threadStatus(id string, a agentUsage, now time.Time) ThreadStatus {
	ts := ThreadStatus{ID: id}
	ts.Platform, ts.Thread, _ = SplitThreadID(id)
	if p := b.chat(ts.Platform); p != nil && p.Conversation != nil {
		ts.Channel, ts.Starter, _ = p.Conversation(ts.Thread)
	}
	es := b.engine.Status(id)
	ts.Profile, ts.Queued = es.Profile, es.Queued
	if es.Busy {
		ts.Turn = &TurnStatus{State: string(es.Turn), Started: es.TurnStarted, AgeSeconds: now.Sub(es.TurnStarted).Seconds()}
	}
	if a.Agent == nil {
		return ts
	}
	as := &AgentStatus{PID: a.Proc.PID(), Host: a.Where, TakenOver: a.Adopted, Session: a.SessionID, Started: a.Started, UptimeSeconds: now.Sub(a.Started).Seconds()}
	if u, err := a.usage, a.err; err != nil {
		as.UsageError = err.Error()
	} else {
		as.MemoryBytes, as.MemoryMaxBytes, as.Accounting = u.Memory, u.MemoryMax, u.Source
		if u.CPUCounted {
			cpu := u.CPU.Seconds()
			as.CPUSeconds = &cpu
		}
	}
	ts.Agent = as
	if ts.Profile == "" {
		ts.Profile = a.Profile.Name
	}
	return ts
}

package broker

import (
	"context"
	"fmt"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/config"
	"acpbroker/schedule"
)

// scheduleRunner starts the schedules' runs in their platforms' threads.
type scheduleRunner struct{ b *Broker }

var _ schedule.Runner = scheduleRunner{}

// threads is the Server of the platform named, or nil.
func (b *Broker) threads(platform string) *thread.Server {
	if p := b.chat(platform); p != nil {
		return p.Threads
	}
	return nil
}

func (r scheduleRunner) Start(ctx context.Context, sc config.Schedule, run schedule.Run, sink func(adapter.Sink) adapter.Sink) (string, string, error) {
	srv := r.b.threads(sc.Platform)
	if srv == nil {
		return "", "", fmt.Errorf("the platform %s takes no schedules", sc.Platform)
	}
	by := "run " + run.By
	switch run.By {
	case "schedule":
		by = "due " + run.Due.UTC().Format("2006-01-02 15:04 UTC")
	case "catch-up":
		by = "missed at " + run.Due.UTC().Format("2006-01-02 15:04 UTC") + ", caught up"
	}
	started, err := srv.Start(ctx, thread.Request{Channel: sc.Channel, Thread: sc.Thread,
		Name: fmt.Sprintf("⏰ %s · %s", sc.Name, run.Due.UTC().Format("2006-01-02 15:04 UTC")),
		By:   fmt.Sprintf("⏰ Schedule **%s** (%s)", sc.Name, by), Text: sc.Prompt, Blocks: []acp.ContentBlock{acp.TextBlock(sc.Prompt)},
		Agent: sc.Agent, Approvers: sc.Approvers, PermissionMode: sc.PermissionMode, PermissionBy: "schedule " + sc.Name + "'s permission_mode",
		Sink: sink})
	if started.Thread == "" {
		return "", "", err
	}
	return ThreadID(sc.Platform, started.Thread), started.Link, err
}

func (r scheduleRunner) Notice(ctx context.Context, sc config.Schedule, id, text string) {
	platform, th, _ := SplitThreadID(id)
	srv := r.b.threads(platform)
	if srv == nil {
		return
	}
	if err := srv.Say(ctx, th, text); err != nil {
		r.b.log.Warn().Err(err).Str("schedule", sc.Name).Msg("a skipped run could not be said in its thread")
	}
}

// platformSchedules are the schedules one platform shows in /schedules.
type platformSchedules struct {
	b        *Broker
	platform string
}

var _ thread.Schedules = platformSchedules{}

func (s platformSchedules) List() []thread.ScheduleInfo {
	var out []thread.ScheduleInfo
	for _, info := range s.b.sched.List(s.platform) {
		where := "channel " + info.Channel
		if info.Thread != "" {
			where = "thread " + info.Thread
		}
		ti := thread.ScheduleInfo{Name: info.Name, Spec: info.Spec, Where: where, Next: info.Next, Enabled: info.Enabled,
			Paused: info.Paused, Running: info.Running, Approvers: info.Approvers}
		if l := info.Last; l.ID != 0 {
			ti.Last = l.Outcome + " (" + l.Started.UTC().Format("2006-01-02 15:04 UTC") + ")"
			if l.Cause != "" {
				ti.Last = l.Outcome + ": " + l.Cause + " (" + l.Started.UTC().Format("2006-01-02 15:04 UTC") + ")"
			}
			if _, th, ok := SplitThreadID(l.Thread); ok {
				ti.LastLink = "thread " + th
			}
		}
		out = append(out, ti)
	}
	return out
}

// runNowWait bounds the wait for a run asked for now to have its thread.
const runNowWait = 10 * time.Second

func (s platformSchedules) Run(name string, by thread.User) (string, error) {
	run, err := s.b.sched.RunNow(name, by.ID)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runNowWait)
	defer cancel()
	th, link := s.b.sched.Await(ctx, name, run.ID)
	switch {
	case link != "":
		return link, nil
	case th != "":
		_, own, _ := SplitThreadID(th)
		return "thread " + own, nil
	}
	return "starting", nil
}

func (s platformSchedules) Pause(name string, paused bool, by thread.User) error {
	return s.b.sched.Pause(name, paused, by.ID)
}

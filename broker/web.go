package broker

import (
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"strings"
	"time"

	"acpbroker/internal/bytesize"
	"acpbroker/web"
)

// openWeb serves the web front end when web.listen is set: each chat
// platform with a thread Server shows its threads there, and its /web
// command gives the sign-in links.
func (b *Broker) openWeb() error {
	cfg := b.cfg.Web
	if cfg.Listen == "" {
		return nil
	}
	wcfg := web.Config{
		PublicURL:      cfg.PublicURL,
		SessionTTL:     cfg.SessionTTL,
		TrustedProxies: cfg.TrustedProxies,
		Admin:          b.webAdmin,
		Status:         func(context.Context) []web.Section { return statusSections(b.Status()) },
		Logger:         b.log.With().Str("part", "web").Logger(),
	}
	if b.store != nil {
		wcfg.State = b.store // the pages' turns survive a restart
	}
	b.web = web.New(wcfg)
	for _, p := range b.chats {
		if srv := cmp.Or(p.Threads, p.Web); srv != nil {
			srv.SetWeb(b.web.Platform(p.name, srv))
		}
	}
	if err := b.web.Listen(cfg.Listen); err != nil {
		return err
	}
	b.metrics.Register(b.web)
	b.log.Info().Str("addr", b.web.Addr()).Str("url", b.web.URL()).Msg("serving the web front end")
	return nil
}

// WebURL is the web front end's address, "" without one.
func (b *Broker) WebURL() string {
	if b.web == nil {
		return ""
	}
	return b.web.URL()
}

// WebAddr is the address the web front end listens on, "" without one.
func (b *Broker) WebAddr() string {
	if b.web == nil {
		return ""
	}
	return b.web.Addr()
}

// webAdmin is the name of the API token tok when it has web_admin, from
// the tokens in force now.
func (b *Broker) webAdmin(tok string) (string, bool) {
	for _, t := range b.live.Load().API.Tokens {
		if t.WebAdmin && subtle.ConstantTimeCompare([]byte(t.Token), []byte(tok)) == 1 {
			return t.Name, true
		}
	}
	return "", false
}

// statusSections are the facts of `broker status` as the operator's view
// shows them.
func statusSections(s Status) []web.Section {
	up := time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second)
	out := []web.Section{{Title: "Broker", Lines: []string{fmt.Sprintf("version %s, pid %d, up %s", s.Version, s.PID, up)}}}
	var plats []string
	for _, p := range s.Platforms {
		line := p.Name + ": connected"
		if !p.Connected {
			line = p.Name + ": not connected (" + p.Problem + ")"
		}
		plats = append(plats, line)
	}
	out = append(out, web.Section{Title: "Platforms", Lines: plats})
	pool := []string{fmt.Sprintf("%d of %d agents live (%d busy, %d starting, %d stopping); %d prompts wait for a slot, %d behind their thread's turn",
		s.Pool.Live, s.Pool.Max, s.Pool.Busy, s.Pool.Starting, s.Pool.Stopping, s.Pool.Waiting, s.Pool.Queued)}
	for _, p := range s.Pool.Profiles {
		limit := "the pool's limit"
		if p.Max > 0 {
			limit = fmt.Sprintf("at most %d", p.Max)
		}
		pool = append(pool, fmt.Sprintf("profile %s: %d live, %d busy, %d starting, %d waiting (%s)", p.Name, p.Live, p.Busy, p.Starting, p.Waiting, limit))
	}
	out = append(out, web.Section{Title: "Pool", Lines: pool})
	if len(s.Hosts) > 0 {
		var hosts []string
		for _, h := range s.Hosts {
			line := fmt.Sprintf("%s: %d agents of this broker, %d running of %d, heard %s ago", h.Name, h.Agents, h.Running, h.Capacity,
				time.Duration(h.SilentSeconds*float64(time.Second)).Round(time.Second))
			if h.Lost {
				line = h.Name + ": LOST, " + strings.TrimPrefix(line, h.Name+": ")
			}
			if h.MemoryBytes > 0 {
				line += fmt.Sprintf(", %s of %s memory free", bytesize.Format(int64(h.MemoryAvailableBytes)), bytesize.Format(int64(h.MemoryBytes)))
			}
			hosts = append(hosts, line)
		}
		out = append(out, web.Section{Title: "Agent hosts", Lines: hosts})
	}
	var agents []string
	for _, t := range s.Threads {
		line := t.ID
		if t.Profile != "" {
			line += " (" + t.Profile + ")"
		}
		if a := t.Agent; a != nil {
			mem := bytesize.Format(a.MemoryBytes)
			if a.MemoryMaxBytes > 0 {
				mem += " of " + bytesize.Format(a.MemoryMaxBytes)
			}
			cpu := "CPU not counted"
			if a.CPUSeconds != nil {
				cpu = fmt.Sprintf("CPU %.1fs", *a.CPUSeconds)
			}
			if a.UsageError != "" {
				mem, cpu = "usage unknown ("+a.UsageError+")", ""
			}
			if a.Host != "" {
				line += " on " + a.Host
			}
			line += fmt.Sprintf(": pid %d, up %s, %s, %s", a.PID, time.Duration(a.UptimeSeconds*float64(time.Second)).Round(time.Second), mem, cpu)
		} else {
			line += ": no agent"
		}
		if t.Turn != nil {
			line += fmt.Sprintf("; turn %s for %s", t.Turn.State, time.Duration(t.Turn.AgeSeconds*float64(time.Second)).Round(time.Second))
		}
		if t.Queued > 0 {
			line += fmt.Sprintf("; %d queued", t.Queued)
		}
		agents = append(agents, line)
	}
	if len(agents) == 0 {
		agents = []string{"none"}
	}
	out = append(out, web.Section{Title: "Threads and agents", Lines: agents})
	return out
}

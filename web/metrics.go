package web

import (
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Server)(nil)

// Describe sends the descriptions of the web front end's metrics.
func (s *Server) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, statsMetrics) }

// Collect sends the web front end's metrics as Stats has them now.
func (s *Server) Collect(ch chan<- prometheus.Metric) { metrics.Collect(ch, s.Stats(), statsMetrics) }

var statsMetrics = []metrics.Stat[Stats]{
	metrics.Gauge("web_sessions", "Sign-ins to the web front end that last.", func(s Stats) int { return s.Sessions }),
	metrics.Gauge("web_signin_links", "Sign-in links given and not yet used or expired.", func(s Stats) int { return s.Links }),
	metrics.Gauge("web_watchers", "Pages watching a thread live (Server-Sent Events).", func(s Stats) int { return s.Watchers }),
	metrics.Gauge("web_renders", "Renderings of turns kept for the pages watching them.", func(s Stats) int { return s.Renders }),
	metrics.Gauge("web_render_bytes", "Bytes of the renderings of turns kept for the pages watching them.", func(s Stats) int { return s.RenderBytes }),
	metrics.Gauge("web_threads", "Threads whose recent turns the web front end keeps.", func(s Stats) int { return s.Threads }),
}

package broker

import (
	"slices"

	"acpbroker/chat/slack"
	"acpbroker/chat/thread"
	"acpbroker/config"
)

// Slack makes the Slack platform from the [slack] keys and the Slack
// channels' profiles; adjust, if not nil, changes the client's
// configuration first (for tests: what no key says). Its threads are
// named by their channel and ts ("slack:C0123/1700000000.000100" in the
// broker). A reload gives the client the access lists again.
func Slack(adjust func(*slack.Config)) PlatformFunc {
	return func(p Parts) (Platform, error) {
		sc := slackConfig(p.Config)
		sc.Memory = p.Memory
		sc.Agents = p.Agents
		sc.Logger = p.Logger
		if adjust != nil {
			adjust(&sc)
		}
		c, err := slack.New(sc, p.Engine)
		if err != nil {
			return Platform{}, err
		}
		return Platform{
			Platform:     c,
			Reload:       func(cfg *config.Config) { c.SetAccess(slackAccess(cfg)) },
			Metrics:      c,
			Conversation: c.Conversation,
			Threads:      c.Threads(),
		}, nil
	}
}

func slackConfig(cfg *config.Config) slack.Config {
	s := cfg.Slack
	return slack.Config{
		BotToken:      s.BotToken,
		AppToken:      s.AppToken,
		Mode:          s.Mode,
		SigningSecret: s.SigningSecret,
		Listen:        s.Listen,
		APIURL:        s.APIURL,
		Access:        slackAccess(cfg),
		BareThreads:   true,
		EditInterval:  s.EditInterval,
		MaxMessages:   s.MaxMessages,
		MaxFileBytes:  s.MaxFileBytes,
		MaxImageBytes: s.MaxImageBytes,
		MaxTextBytes:  s.MaxTextBytes,
	}
}

// slackAccess are the [slack] access lists, with each Slack channel of
// [channels."ID"] allowed and given its profile.
func slackAccess(cfg *config.Config) slack.Access {
	s := cfg.Slack
	channels := slices.Clone(s.AllowedChannels)
	agents := map[string]string{}
	for _, id := range sortedKeys(cfg.Channels) {
		if !config.SlackID(id) {
			continue // Discord's
		}
		agents[id] = cfg.Channels[id]
		if !slices.Contains(channels, id) {
			channels = append(channels, id)
		}
	}
	return slack.Access{
		Access: thread.Access{
			ChannelAgents:    agents,
			AllowedChannels:  channels,
			AllowAllChannels: s.AllowAllChannels,
			AllowedUsers:     s.AllowedUsers,
			AllowedRoles:     s.AllowedGroups,
			Approvers:        s.Approvers,
			ApproverRoles:    s.ApproverGroups,
			ShowThoughts:     s.ShowThoughts,
		},
		AllowDMs: s.AllowDMs,
	}
}

var _ slack.Memory = Memory(nil)

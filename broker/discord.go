package broker

import (
	"slices"

	"acpbroker/chat/discord"
	"acpbroker/config"
)

// Discord makes the Discord platform from the [discord] keys and the
// channels' profiles; adjust, if not nil, changes the client's
// configuration first (for tests: what no key says). A reload gives the
// client the access lists and /new's profiles again.
func Discord(adjust func(*discord.Config)) PlatformFunc {
	return func(p Parts) (Platform, error) {
		dc := discordConfig(p.Config)
		dc.Memory = p.Memory
		dc.Agents = p.Agents
		dc.Logger = p.Logger
		if adjust != nil {
			adjust(&dc)
		}
		c, err := discord.New(dc, p.Engine)
		if err != nil {
			return Platform{}, err
		}
		return Platform{
			Platform: c,
			Reload: func(cfg *config.Config) {
				c.SetAccess(discordAccess(cfg))
				c.RefreshCommands()
			},
			Metrics:      c,
			Conversation: c.Conversation,
			Threads:      c.Threads(),
		}, nil
	}
}

func discordConfig(cfg *config.Config) discord.Config {
	d := cfg.Discord
	return discord.Config{
		Token:         d.Token,
		APIURL:        d.APIURL,
		Access:        discordAccess(cfg),
		EditInterval:  d.EditInterval,
		MaxMessages:   d.MaxMessages,
		MaxFileBytes:  d.MaxFileBytes,
		MaxImageBytes: d.MaxImageBytes,
		MaxTextBytes:  d.MaxTextBytes,
	}
}

func discordAccess(cfg *config.Config) discord.Access {
	d := cfg.Discord
	channels := slices.Clone(d.AllowedChannels)
	for _, id := range sortedKeys(cfg.Channels) {
		if !slices.Contains(channels, id) {
			channels = append(channels, id) // a channel with a profile is allowed
		}
	}
	return discord.Access{
		ChannelAgents:    cfg.Channels,
		AllowedChannels:  channels,
		AllowAllChannels: d.AllowAllChannels,
		AllowedUsers:     d.AllowedUsers,
		AllowedRoles:     d.AllowedRoles,
		Approvers:        d.Approvers,
		ApproverRoles:    d.ApproverRoles,
		AllowedBots:      d.AllowedBots,
		ShowThoughts:     d.ShowThoughts,
	}
}

var _ discord.Memory = Memory(nil)

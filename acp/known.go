package acp

// knownUpdates are the sessionUpdate kinds of ACP v1. Others are passed
// on with only their kind, and counted.
var knownUpdates = map[string]bool{
	UpdateMessageChunk: true, UpdateThoughtChunk: true, UpdateUserMessageChunk: true,
	UpdateToolCall: true, UpdateToolCallUpdate: true, UpdatePlan: true,
	"available_commands_update": true, "current_mode_update": true, "config_option_update": true,
	UpdateSessionInfo: true, UpdateUsage: true,
}

// knownBlocks are the content block types of ACP v1, knownToolContent
// the types of a tool call's content items.
var (
	knownBlocks      = map[string]bool{"text": true, "image": true, "audio": true, "resource_link": true, "resource": true}
	knownToolContent = map[string]bool{"content": true, "diff": true, "terminal": true}
)

// countUnknown counts an update of a kind this client does not know, and
// content blocks of types it does not know; they are shown as nothing.
func (c *Conn) countUnknown(u *Update) {
	if !knownUpdates[u.Kind] {
		c.stats.unknownUpdates.Add(1)
		c.log.Debug().Str("kind", logged(u.Kind)).Msg("update of an unknown kind; ignored")
		return
	}
	n := 0
	if u.Content != nil && !knownBlocks[u.Content.Type] {
		n++
	}
	for _, item := range u.ToolOutput {
		if !knownToolContent[item.Type] || item.Content != nil && !knownBlocks[item.Content.Type] {
			n++
		}
	}
	if n > 0 {
		c.stats.unknownContent.Add(uint64(n))
		c.log.Debug().Str("kind", logged(u.Kind)).Int("items", n).Msg("content of an unknown type; ignored")
	}
}

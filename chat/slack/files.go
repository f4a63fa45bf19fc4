package slack

import (
	"context"
	"strings"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// upload shares files in a thread (threadTS "": at the top level of the
// channel) as one message, the way Slack takes files now: an upload URL
// for each (files.getUploadURLExternal), its bytes sent there, then
// files.completeUploadExternal for them all. An empty file is left out:
// Slack takes none.
func (c *Client) upload(ctx context.Context, channel, threadTS string, files []thread.File) error {
	var done []slackapi.FileSummary
	for _, f := range files {
		if f.Data == "" {
			c.log.Debug().Str("file", f.Name).Msg("empty file not uploaded")
			continue
		}
		var up *slackapi.GetUploadURLExternalResponse
		err := c.call(ctx, "files.getUploadURLExternal", "", false, func(ctx context.Context) (err error) {
			up, err = c.api.GetUploadURLExternalContext(ctx, slackapi.GetUploadURLExternalParameters{FileName: f.Name, FileSize: len(f.Data)})
			return err
		})
		if err != nil {
			return err
		}
		err = c.call(ctx, "upload", "", false, func(ctx context.Context) error {
			return c.api.UploadToURL(ctx, slackapi.UploadToURLParameters{UploadURL: up.UploadURL, Reader: strings.NewReader(f.Data), Filename: f.Name})
		})
		if err != nil {
			return err
		}
		done = append(done, slackapi.FileSummary{ID: up.FileID, Title: f.Name})
	}
	if len(done) == 0 {
		return nil
	}
	return c.call(ctx, "files.completeUploadExternal", "", false, func(ctx context.Context) error {
		_, err := c.api.CompleteUploadExternalContext(ctx, slackapi.CompleteUploadExternalParameters{
			Files: done, Channel: channel, ThreadTimestamp: threadTS,
		})
		return err
	})
}

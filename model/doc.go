// Package model is an agent backed by a chat model: it renders a run's
// history into a provider's messages, offers the run's tools as function
// tools, and turns the model's reply into decisions, with each tool call's
// arguments exactly as the model sent them. Providers are reached through
// their official Go SDKs: OpenAI's Chat Completions (and every server that
// speaks it: Ollama, vLLM, llama.cpp's server, LM Studio) and Anthropic's
// Messages.
//
// Every request is recorded on the run before it is sent, and its reply or
// failure after (events.ModelAttempted, ModelReplied, ModelFailed), so a
// run's model traffic can be audited, budgeted and served again. A reply
// with several tool calls is several steps: the agent takes the next one
// from the recorded reply, and never asks the model again for a reply the
// log holds. Budgets (calls, tokens, spend) are checked before each attempt
// on the totals the events give.
//
// The model is the untrusted part: what it returns is data. This package
// decides nothing about what runs (the driver and its policy do) and holds
// no handle to the log beyond the recorder the driver hands it per step.
package model

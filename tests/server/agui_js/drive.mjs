// Drives a statewise AG-UI endpoint with the real @ag-ui/client HttpAgent.
//
// Usage: node drive.mjs <endpoint url> <thread id> [bearer key]
// Reads one JSON command per line on stdin and answers one JSON line on stdout per
// command, with the client's own state and messages (built only by the client library
// applying the events it received):
//   {"cmd": "run", "text": "...", "resume": [...]?, "tools": [...]?, "toolResults": [...]?}
//   {"cmd": "setState", "state": {...}}   (the user's own edits in the frontend)
//   {"cmd": "quit"}
import { createInterface } from "node:readline";
import { HttpAgent, randomUUID } from "@ag-ui/client";

const [url, threadId, key] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  threadId,
  headers: key ? { Authorization: `Bearer ${key}` } : {},
});

function report(extra) {
  return JSON.stringify({
    state: agent.state,
    messages: agent.messages,
    pendingInterrupts: agent.pendingInterrupts,
    ...extra,
  });
}

async function run(command) {
  if (command.text !== undefined) {
    agent.addMessage({ id: randomUUID(), role: "user", content: command.text });
  }
  for (const result of command.toolResults ?? []) {
    agent.addMessage({
      id: randomUUID(),
      role: "tool",
      toolCallId: result.toolCallId,
      content: result.content,
    });
  }
  const seen = [];
  const errors = [];
  const outcome = {};
  await agent.runAgent(
    {
      tools: command.tools ?? [],
      ...(command.resume !== undefined ? { resume: command.resume } : {}),
    },
    {
      onEvent: ({ event }) => {
        seen.push(event.type);
      },
      onRunFinishedEvent: (params) => {
        outcome.outcome = params.outcome ?? "success";
        const result = params.result ?? params.event?.result;
        if (result !== undefined) outcome.result = result;
      },
      onRunErrorEvent: ({ event }) => {
        errors.push(event.message);
      },
    },
  );
  return { events: seen, errors, ...outcome };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  try {
    if (command.cmd === "quit") break;
    if (command.cmd === "setState") {
      agent.setState(command.state);
      process.stdout.write(report({}) + "\n");
    } else if (command.cmd === "run") {
      const result = await run(command);
      process.stdout.write(report(result) + "\n");
    } else {
      process.stdout.write(JSON.stringify({ error: `unknown command ${command.cmd}` }) + "\n");
    }
  } catch (error) {
    process.stdout.write(report({ error: String(error && error.message ? error.message : error) }) + "\n");
  }
}
process.exit(0);

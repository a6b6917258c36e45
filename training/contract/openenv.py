"""An OpenEnv environment served over HTTP (`POST /reset`, `POST /step {"action": ...}`, each answering
`{"observation", "reward", "done"}`) as an agent's environment: for environments that run elsewhere
(a sandbox, a browser). Subclass it with the server's address and name the subclass in
`method_args.environment`; its one tool, `step`, sends the model's action. A subclass that knows its
action's fields offers them as the tool's parameters:

    class Echo(OpenEnvHTTP):
        base_url = "http://echo-env:8000"

        def step(self, message: str) -> str:
            '''Send a message to be echoed.

            Args:
                message: The message.
            '''
            return self._act({"message": message})

Each trajectory's instance holds its own episode: its `reward` (the last step's), `rewards` and `done`
are there for the reward functions that read `environments`. Torch-free, standard library only.
"""

from __future__ import annotations

import json
import urllib.request


class OpenEnvHTTP:
    base_url = ""  # the server, e.g. http://my-env:8000
    timeout_s = 60.0  # per request (the tool's own timeout, method_args.tool_timeout, ends a trajectory too)

    def reset(self, seed: int | None = None, **row) -> str:
        """A new episode (the trajectory's seed where the server takes one); its first observation."""
        self.reward, self.rewards, self.done = None, [], False
        return self._answer(self._post("/reset", {} if seed is None else {"seed": seed}))

    def step(self, action: dict) -> str:
        """Act in the environment.

        Args:
            action: The action, with the fields of the environment's Action type.
        """
        return self._act(action)

    def _act(self, action: dict) -> str:
        if self.done:
            raise RuntimeError("the episode is over: answer without calling the environment again")
        return self._answer(self._post("/step", {"action": action}))

    def _answer(self, result: dict) -> str:
        self.reward, self.done = result.get("reward"), bool(result.get("done", False))
        if self.reward is not None:
            self.rewards.append(self.reward)
        observation = result.get("observation")
        return observation if isinstance(observation, str) else json.dumps(observation)

    def _post(self, path: str, body: dict) -> dict:
        if not self.base_url:
            raise RuntimeError(f"{type(self).__name__}.base_url is not set: the OpenEnv server's address")
        request = urllib.request.Request(self.base_url.rstrip("/") + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())

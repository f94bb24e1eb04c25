"""The rewards RLOO maximises: list them in REWARD_FUNCTIONS; write new ones in this file.

RLOO samples several completions per prompt and uses the mean reward of the others as each one's
baseline. Every function in the list scores every completion; config.yaml's `reward_weights` holds
one weight per function in the same order. TRL passes `completions` plus every column of the data
set as a keyword argument holding one value per completion; return a float per completion (None:
not applicable). Helpers for your own: completion_text(c) is the generated text, final_answer(text)
the last \\boxed{...} or number in it.

Shipped (from tuneplane.lifecycle.trl_rewards): accuracy_reward compares the final answer with the
row's `answer` column; format_reward pays a little for having a readable final answer at all.
"""

from tuneplane.lifecycle.trl_rewards import accuracy_reward, completion_text, final_answer, format_reward

__all__ = ["REWARD_FUNCTIONS", "accuracy_reward", "completion_text", "final_answer", "format_reward"]

REWARD_FUNCTIONS = [accuracy_reward, format_reward]

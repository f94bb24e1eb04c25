"""What GRPO trains the policy towards: edit REWARD_FUNCTIONS, or add functions of your own here.

For each prompt GRPO samples a group of completions and scores each with every function below; the
scores are weighted by `reward_weights` in config.yaml (one weight per function, in order) and
summed, and completions that beat their group's mean are reinforced. A function takes the batch's
`completions` and the data set's columns as keyword arguments (one value per completion) and
returns one float per completion, or None where it does not apply, for example:

    def short_answer(completions, **_):
        return [1.0 if len(completion_text(c)) < 400 else 0.0 for c in completions]

The shipped pair (tuneplane.lifecycle.trl_rewards) reads an `answer` column: the expected final
answer, a number or the content of a \\boxed{...}.
"""

from tuneplane.lifecycle.trl_rewards import accuracy_reward, completion_text, final_answer, format_reward

__all__ = ["REWARD_FUNCTIONS", "accuracy_reward", "completion_text", "final_answer", "format_reward"]

REWARD_FUNCTIONS = [accuracy_reward, format_reward]

"""The typed run configuration: every section and field, its type, default and meaning.

Field-level and cross-field checks that need only the config live here; checks against what is installed
(roles, verifier, estimator, trainer) are `rolecall.compose.checks`', run by `rolecall.config.validate_config`.
"""
from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationInfo,
                      field_validator, model_validator)

from rolecall.engines.base import DEFAULT_MAX_BATCH
from rolecall.rewards.verifier import verifier_names
from rolecall.tasks import get_task, task_names


def _types_in(annotation: Any) -> set:
    """Every type a field's annotation names, through Union, Optional and Annotated."""
    found = {annotation} if isinstance(annotation, type) or annotation is Any else set()
    for arg in get_args(annotation):
        found |= _types_in(arg)
    return found


def _finite_data(value: Any, path: str) -> Any:
    """`value` (free-form options: plain data) unchanged, or ValueError naming the first NaN/Inf in it."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: must be a finite number, got {value!r}")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        _finite_data(v, f"{path}.{k}")
    return value


class _Strict(BaseModel):
    # allow_inf_nan=False: every float field, nested and dict values too, refuses nan/inf (lr=inf would wreck weights).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads `steps: true` as 1; a boolean where a number belongs is a typo.
        types = _types_in(cls.model_fields[info.field_name].annotation)
        if isinstance(value, bool) and types & {int, float} and not types & {bool, Any}:
            raise ValueError("Input should be a number, not a boolean")
        return value


class PolicyOptimCfg(_Strict):
    """A policy's own optimizer settings; a field left unset takes the run's `optim` value."""

    lr: PositiveFloat | None = Field(None, description="This policy's peak learning rate (DAC trains its searcher and generator at different rates).")
    weight_decay: float | None = Field(None, ge=0, description="This policy's AdamW weight decay.")
    grad_clip: PositiveFloat | None = Field(None, description="This policy's max gradient norm.")


class PolicyLoraCfg(_Strict):
    """A policy's own LoRA shape; a field left unset takes the run's `lora` value."""

    r: PositiveInt | None = Field(None, description="This policy's LoRA rank.")
    alpha: PositiveInt | None = Field(None, description="This policy's LoRA alpha.")
    dropout: float | None = Field(None, ge=0.0, lt=1.0, description="This policy's LoRA dropout.")
    target_modules: Union[str, list[str], None] = Field(None, description="Modules that get this policy's LoRA.")


class PolicyCfg(_Strict):
    trainable: bool = Field(True, description="False: the adapter is used for rollouts but never updated.")
    model: str | None = Field(None, description="This policy's own base model (a local HF directory or `embedded`); "
                                                "default: the run's model.path. Each base is served by its own engine.")
    init_from: str | None = Field(None, description="Start from this adapter: a PEFT adapter directory, a checkpoint's "
                                                    "<policy>/ folder, or an earlier run directory (its latest checkpoint).")
    optim: PolicyOptimCfg = Field(default_factory=PolicyOptimCfg, description="Per-policy optimizer overrides, e.g. {lr: 1e-3}.")
    lora: PolicyLoraCfg = Field(default_factory=PolicyLoraCfg, description="Per-policy LoRA shape, e.g. {r: 8}.")


class ModelCfg(_Strict):
    path: str = Field("embedded", description="`embedded` (the shipped tiny model), a named real model (`smollm2-135m`, "
                                              "after `rolecall get-model smollm2-135m`), a `.gguf` file (converted once, "
                                              "cached by content) or a local HF checkpoint directory.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype; auto = bfloat16 where the hardware computes it natively (a bf16 GPU; "
                            "avx512_bf16 or AMX) and this model's own pass measures faster in it, else float32.")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto | cpu | cuda | cuda:N.")
    enable_thinking: bool = Field(False, description="Passed to the chat template (Qwen3 thinking; the paper disables it).")
    chat_template: str | None = Field(None, description="Path to a Jinja chat template replacing the checkpoint's own.")


class DataCfg(_Strict):
    path: str | None = Field(None, description="Local dataset: .parquet, .jsonl, .json, a `datasets` directory or a parquet folder.")
    format: Literal["dapo_math", "gsm8k", "deepcoder", "qa"] = Field("dapo_math", description="Column layout of the rows.")
    source_split: str = Field("train", description="Split to read from a DatasetDict or parquet folder.")
    val_path: str | None = Field(None, description="Separate validation file; without it the validation split is carved from `path`.")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="Held-out fraction when no val_path and no test_rows (paper math split: 0.1).")
    split_seed: int = Field(42, description="Seed of the held-out split (paper: 42).")
    test_rows: PositiveInt | None = Field(
        None, description="Hold out exactly this many rows (the first N of the seed-`split_seed` shuffle) when no "
                          "val_path; when set it replaces test_fraction (paper code split: 1000; must be fewer "
                          "than the rows kept).")
    on_bad_row: Literal["error", "skip"] = Field("error", description="A row that fails validation stops the run, or is dropped and counted.")
    max_prompt_tokens: PositiveInt | None = Field(None, description="Rows whose prompt is longer (in model tokens) are bad rows.")
    n_val: PositiveInt | None = Field(None, description="Use at most this many validation problems.")
    limit: PositiveInt | None = Field(None, description="Train on at most this many problems (smoke tests; see n_val for validation).")

    @model_validator(mode="after")
    def _has_validation(self) -> "DataCfg":
        # The one place this is checked: the CLI's config and a library caller's DataCfg alike.
        if self.path and not self.val_path and self.test_rows is None and self.test_fraction == 0:
            raise ValueError("data.test_fraction: 0 with no data.val_path leaves no validation problems; "
                             "allowed: a fraction in (0, 1), or set data.test_rows or data.val_path")
        return self

class TaskCfg(_Strict):
    name: str = Field("arithmetic", description=f"A task of rolecall.tasks, one file each: {', '.join(task_names())} (dataset: "
                                                "the `data` section, docs/datasets.md; reasoning_gym: task.gym).")
    digits: PositiveInt = Field(2, description="Operand digits: the difficulty knob.")
    ops: str = Field("+-", description="Operators to draw from: '+', '-' or both.")
    n_val: PositiveInt = Field(200, description="Validation problems (a fixed, disjoint split; humaneval: at most 82, half of 164).")
    seed: int = Field(1234, description="Seed of the train/validation split (reasoning_gym: the validation problems' "
                                        "seed; the training seed is derived from it).")
    people: PositiveInt = Field(240, ge=2, description="multihop: invented people in the corpus (3 questions each).")
    gym: str | None = Field(None, description="reasoning_gym: the reasoning-gym dataset to draw problems from, e.g. "
                                              "basic_arithmetic, chain_sum, leg_counting (all of them: python -c \"import "
                                              "reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))\").")
    gym_options: dict[str, Any] = Field(
        default_factory=dict, description="reasoning_gym: the dataset's own options, the fields of its config class "
                                          "(e.g. {min_terms: 2, max_terms: 2} for basic_arithmetic); each is "
                                          "type-checked against that class's field types at config load (a bool "
                                          "must be true/false, an int a whole number, a number finite), then by "
                                          "reasoning-gym. seed and size are rolecall's (task.seed, task.n_val, "
                                          "task.gym_train_size).")
    gym_train_size: PositiveInt = Field(5000, description="reasoning_gym: training problems generated (before dropping any "
                                                          "whose question is also a validation question).")
    options: dict[str, Any] = Field(default_factory=dict, description="The task's own options (its TaskSource.options "
                                    "dataclass), each checked against its field's type at load; the fields above are built-in knobs.")

    @field_validator("gym_options")
    @classmethod
    def _finite_gym_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _finite_data(v, "task.gym_options")

    @model_validator(mode="after")
    def _task_options_and_gym(self) -> "TaskCfg":
        get_task(self.name).parse_options(_finite_data(self.options, "task.options"))  # declared by the task, not here
        if self.name != "reasoning_gym" and (self.gym is not None or self.gym_options):
            raise ValueError(f"task.gym / task.gym_options are set but task.name is {self.name!r}; "
                             "set task.name=reasoning_gym to draw problems from reasoning-gym")
        return self


class WorkflowCfg(_Strict):
    name: str = Field("voting", description="A shipped workflow (a file each in rolecall/workflows/; an unknown name is refused with the list) or 'module:Class'.")
    prompts: str | None = Field(None, description="Shipped prompt set name or a path to a prompts .yaml file; "
                                "default: the workflow's own (a `prompts=` default in its constructor), else 'math'.")
    options: dict[str, Any] = Field(default_factory=dict, description="Workflow keyword options (n_voters, rounds, n_workers); "
                                    "every number in them must be finite.")

    @field_validator("options")
    @classmethod
    def _finite_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _finite_data(v, "workflow.options")


class LoraCfg(_Strict):
    r: PositiveInt = Field(16, description="LoRA rank (paper preset: 64).")
    alpha: PositiveInt = Field(32, description="LoRA alpha.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: Union[str, list[str]] = Field("all-linear", description="Modules that get LoRA.")


class RolloutCfg(_Strict):
    group_size: PositiveInt = Field(8, description="Episodes sampled per problem (GRPO group n).")
    problems_per_step: PositiveInt = Field(8, description="Problems per training step.")
    temperature: PositiveFloat = Field(0.7, description="Sampling temperature (training and validation).")
    max_new_tokens: PositiveInt = Field(48, description="Token budget of one turn; longer turns are cut and marked truncated.")
    max_new_tokens_by_role: dict[str, PositiveInt] = Field(default_factory=dict, description="Per-role budget overrides.")
    max_prompt_tokens: PositiveInt | None = Field(None, description="Longest prompt a turn may have (chat history included); a longer turn is not generated and is marked truncated.")
    ignore_eos: bool = Field(False, description="Sample every turn to its full token budget: end-of-turn tokens do not stop "
                                                "it, and the turn is marked truncated. For speed measurements that need the "
                                                "same work in every arm; answers run on past their end.")
    max_batch: PositiveInt = Field(DEFAULT_MAX_BATCH, description="Most rows in one generate call.")
    engine: Literal["hf", "vllm"] = Field("hf", description="Generation engine: hf (in-process transformers) or vllm "
                                                            "(pip install vllm; every adapter resident, one per request).")
    vllm_memory_fraction: float = Field(0.9, gt=0, le=1, description="vLLM's gpu_memory_utilization (on its CPU build: "
                                                                     "the share of RAM it reserves).")
    actors: int = Field(0, ge=0, description="Rollout actors on Ray (0 = in-process): each holds the base models and "
                                             "an engine and plays a share of each step's problems, seeded per request.")
    ray_address: str | None = Field(None, description="A Ray cluster to run the rollout actors on (default: a local instance).")
    actor_gpus: float = Field(0, ge=0, description="GPUs Ray reserves for each rollout actor (0: none, CPU actors). "
                                                   "1 gives each actor a device of its own on a GPU cluster.")
    request_seeds: bool = Field(False, description="Give every model call its own sampling seed (from train.seed, step, "
                                                   "problem, sample, turn): episodes then do not depend on how calls are "
                                                   "batched or split over workers. Off: torch's global generator.")
    episode_timeout_s: PositiveFloat | None = Field(
        None, description="Wall-clock budget of one episode; an episode over it is cut at its next model call "
                          "(marked timed_out, scored on the answer it has: none) while the rest of the batch proceeds.")


class AlgoCfg(_Strict):
    estimator: Union[str, dict[str, str]] = Field("grpo", description="Advantage estimator (grpo, agentwise, turnwise, drgrpo, rloo, softrank, counterfactual: `rolecall train --dry-run` lists them), or one per role, e.g. {aggregator: counterfactual, '*': grpo} ('*': every role not named; default grpo).")
    estimator_options: dict[str, Union[float, dict[str, float]]] = Field(default_factory=dict, description="The estimator's tuning, e.g. {tau: 0.8} for softrank; with one estimator per role, by estimator: {softrank: {tau: 0.8}}.")
    group_by: Literal["slot", "role", "turn", "episode"] | None = Field(
        None, description="Group key next to the problem (turn = turn index and role); default: the estimator's.")
    clip_low: float = Field(0.2, gt=0, lt=1, description="PPO clip epsilon below 1.")
    clip_high: float = Field(0.28, gt=0, description="PPO clip epsilon above 1.")
    dual_clip: float | None = Field(3.0, gt=1, description="Dual-clip constant c for negative advantages; null disables.")
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = Field("seq-mean-token-mean", description="Loss aggregation.")
    mini_batch_problems: PositiveInt | None = Field(
        None, description="PPO mini-batch in problems, as the paper counts it: each policy's rows are dealt into "
                          "ceil(rows / (mini_batch_problems x group_size)) mini-batches, one optimizer step each, so a "
                          "policy that plays 3 slots takes 3 steps per iteration. Default: rollout.problems_per_step.")
    mini_batches: PositiveInt | None = Field(
        None, description="Not the paper's rule: a fixed number of optimizer steps per iteration for every policy, "
                          "whatever its rows. Set this or mini_batch_problems, not both.")
    ppo_epochs: PositiveInt = Field(1, description="Passes over the rollout batch.")
    kl_coef: float = Field(0.0, ge=0, description="KL(policy || base model, adapters off) added to the loss with this weight "
                                                  "(k3 estimator, aggregated like the loss); 0 = off, as in the paper's runs.")
    kl_coef_by_role: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="Per-role KL anchor: these roles use their own KL weight instead of kl_coef "
                                          "(rolecall's per-role KL anchor, e.g. {generator: 0.05}).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus: this weight times the policy's token entropy "
                                                       "(aggregated like the loss) is subtracted from the loss; 0 = off.")
    coherence_lambda: float = Field(0.0, ge=0, le=1, description="Gradient-coherence regularizer: each adapter's gradient "
                                    "is scaled by 1 - lambda * clamp(cos(g, EMA of g), 0, 1) before clipping; 0 = off.")
    coherence_beta: float = Field(0.9, ge=0, lt=1, description="EMA decay of the gradient history the coherence "
                                                               "regularizer compares against.")
    micro_batch_tokens: PositiveInt | Literal["auto"] = Field("auto", description="Most padded tokens in one forward/"
        "backward (gradient accumulation). auto: about 1 GiB of activations on a CPU by the model's sizes, 16,384 elsewhere.")


class OptimCfg(_Strict):
    lr: PositiveFloat = Field(2e-3, description="AdamW learning rate (paper preset 2e-5 for billion-parameter models).")
    warmup_steps: int = Field(3, ge=0, description="Linear warmup, in optimizer steps.")
    schedule: Literal["cosine", "constant"] = Field("cosine", description="Decay after warmup.")
    grad_clip: PositiveFloat = Field(1.0, description="Max gradient norm per adapter.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")


class RewardCfg(_Strict):
    name: str = Field("math", description="Verifier of the final answer: math, code, qa, or your own function "
                                            "as package.module:function (docs/verifiers.md).")
    custom_deadline_s: PositiveFloat = Field(10.0, description="Deadline of one call of a custom reward function; "
                                                               "a call that overruns it makes that sample unscorable "
                                                               "(status timeout) and its process is replaced.")
    custom_workers: PositiveInt = Field(4, description="Processes a custom reward function runs in: the calls of one "
                                                       "batch run this many at once, each under custom_deadline_s.")
    custom_max_abs: float = Field(1e6, gt=0, le=1e12, description="A custom reward's value must be a finite number with "
                                                                  "|value| at most this; NaN, inf, larger values and "
                                                                  "non-numbers make the sample unscorable (status bad_value).")
    format_penalty: float = Field(0.0, ge=0, description="Subtracted when the final answer has no \\boxed{} (math, qa, reasoning_gym; "
                                                         "with an answer_from fallback: nor a fallback answer) or no fenced code block (code).")
    answer_from: Literal["boxed", "boxed_or_last_number", "boxed_or_last_line"] = Field(
        "boxed", description="Where math, reasoning_gym and qa take the answer from: the last \\boxed{} only, or, for a "
                             "completion with no \\boxed{ at all, its last plain number / last non-empty line; the "
                             "score's extracted_from says which was graded (docs/verifiers.md).")
    math_checker: Literal["auto", "math_verify", "strict"] = Field(
        "auto", description="Equivalence: math-verify in a killable worker, or exact/rational match only; auto = strict on the "
                            "built-in arithmetic task (where echoing the question `12+34` would be 'equivalent'), math_verify on datasets.")
    math_deadline_s: PositiveFloat = Field(5.0, description="Hard deadline of one math-verify comparison; an answer that overruns it scores 0 (status pathological), an overrun on the gold answer itself is unscorable.")
    gym_deadline_s: PositiveFloat = Field(5.0, description="Hard deadline of one reasoning-gym score_answer call (reward "
                                                         "reasoning_gym); an answer that overruns it scores 0 (status "
                                                         "pathological), an overrun on the gold answer itself is unscorable.")
    code_mode: Literal["all_pass", "pass_rate"] = Field("all_pass", description="Code reward: 1 only if every test passes (the paper's code), or the fraction passed (the paper's text).")
    code_timeout_s: PositiveFloat = Field(6.0, description="Wall time per hidden test; the whole program gets tests x this plus a grace.")
    code_memory_mb: PositiveInt = Field(1024, description="Address-space limit of the sandboxed program.")
    code_workers: PositiveInt = Field(2, description="Sandboxed programs run at once.")
    allow_unisolated_code: bool = Field(False, description="Run code rewards even where no network namespace can be made (say yes only on a trusted box).")
    qa_metric: Literal["em", "f1"] = Field("em", description="QA reward: normalised exact match or best token F1.")
    max_unscorable_frac: float = Field(0.5, gt=0, le=1, description="A step with more unscorable episodes than this is skipped (no update).")
    max_skipped_steps: PositiveInt = Field(3, description="This many skipped steps in a row halt the run (after a checkpoint).")

    @field_validator("name")
    @classmethod
    def _known_or_import_path(cls, v: str) -> str:
        if v in verifier_names():
            return v
        module, sep, attr = v.partition(":")
        ident = r"[A-Za-z_][A-Za-z0-9_]*"
        if not (sep and re.fullmatch(rf"{ident}(\.{ident})*", module) and re.fullmatch(rf"{ident}(\.{ident})*", attr)):
            raise ValueError(f"unknown {v!r}; allowed: {', '.join(verifier_names())}, or your own function as "
                             "package.module:function")
        return v


class AlarmsCfg(_Strict):
    """Drift alarm thresholds (see rolecall.diagnostics.alarms for the definitions)."""

    enabled: bool = Field(True, description="Watch the metric stream and log alarm events.")
    window: PositiveInt = Field(5, description="Steps averaged for a metric's first and current value.")
    amp_ratio: float = Field(2.0, gt=1, description="gradient_amplification: parallel role's ppl or E[(pi/mu)^2] over its first value.")
    flat_ratio: float = Field(1.25, gt=1, description="gradient_amplification: every other role stays within this ratio.")
    capture_closing: float = Field(0.5, gt=0, lt=1, description="sp_role_capture: gap to the other role shrank to this fraction.")
    capture_move: float = Field(0.5, gt=0, description="sp_role_capture: the captured role moved this fraction of the first gap.")
    cliff_margin: float = Field(0.1, gt=0, le=1, description="validation_cliff: accuracy this far below its running peak.")
    cliff_z: float = Field(1.96, ge=0, description="validation_cliff: the fall must also exceed this many standard errors "
                           "of the difference, sqrt(se_peak^2 + se_now^2) (each row's val/accuracy_se, else binomial "
                           "from val/n; the margin alone where neither is logged). 0: the margin alone.")


class TrainCfg(_Strict):
    steps: PositiveInt = Field(100, description="Training steps.")
    val_every: PositiveInt = Field(10, description="Validate every N steps (and at step 0 and the end).")
    checkpoint_every: PositiveInt = Field(10, description="Checkpoint every N steps (and at the end).")
    keep_last: PositiveInt = Field(3, description="Checkpoints kept.")
    max_minutes: float | None = Field(
        None, gt=0, description="Wall-clock limit of this process, in minutes: the first step to end past it is "
                                "validated and checkpointed, and the run stops there (exit 0; --resume continues it, "
                                "with a fresh limit). None: no limit.")
    stop_below_peak: float | None = Field(
        None, gt=0, le=1, description="Early stop: once val/accuracy has been at least this far below its peak "
                                      "(a fraction: 0.1 = ten points) at train.stop_patience validations in a row, the "
                                      "run stops there, checkpointed, with the best checkpoint kept (exit 0). "
                                      "None: off.")
    stop_patience: PositiveInt = Field(2, description="Validations in a row at least train.stop_below_peak below the peak that end the run.")
    seed: int = Field(0, description="Seed of problem order and sampling.")
    threads: int = Field(0, ge=0, description="torch threads; 0 = a fair share of the cores: all of them for a run "
                                              "alone, split evenly among the rolecall training runs on the machine.")
    samples_per_step: int = Field(4, ge=0, description="Episodes written to samples.jsonl per step.")
    val_samples: int = Field(8, ge=0, description="Validation episodes (the same problems each time) written to val_samples.jsonl, for `rolecall inspect`.")
    sinks: list[Literal["tensorboard", "wandb"]] = Field(default_factory=list, description="Extra metric sinks beside metrics.jsonl.")
    wandb_project: str = Field("rolecall", description="W&B project (sink wandb).")
    wandb_mode: Literal["offline", "online", "disabled"] = Field("offline", description="W&B mode; offline needs no network (sync later with `wandb sync`).")
    diagnostics: Literal["full", "basic"] = Field(
        "full", description="full: every role-level diagnostic (docs/diagnostics.md); basic: loss, chi2_token, ppl, entropy, clip, grad norm only.")
    kl_ref: bool = Field(True, description="With full diagnostics, log kl_ref (KL to the base model, adapters off).")
    kl_ref_rows: PositiveInt = Field(16, description="kl_ref is estimated on this many rows per role per step (one extra no-grad forward over them).")
    max_nonfinite_steps: PositiveInt = Field(
        3, description="This many steps in a row with a NaN/Inf loss, gradient or reward halt the run (after a "
                       "checkpoint); a non-finite update is always skipped and counted.")


class MetaPolicyCfg(_Strict):
    """The deliberation meta-policy and its training: supervised bootstrap, offline corpus, SoftRankPO."""

    name: str = Field("meta", pattern=r"^[A-Za-z0-9_.-]+$", description="Policy name: metrics policy/<name>/..., checkpoints/policy-<name>/.")
    hidden: PositiveInt = Field(32, description="Width of the state encoder and attention (a multiple of heads).")
    heads: PositiveInt = Field(2, description="Attention heads over the peers' states.")
    seed: int = Field(0, description="Seed of the network's init, batch order and sampled actions.")
    sft_problems: PositiveInt = Field(300, description="Training problems deliberated with random actions to collect oracle-labelled states.")
    sft_epochs: PositiveInt = Field(40, description="Epochs of the supervised bootstrap (cross-entropy on oracle actions).")
    sft_lr: PositiveFloat = Field(3e-3, description="AdamW learning rate of the bootstrap.")
    corpus_problems: PositiveInt = Field(300, description="Training problems deliberated by the bootstrapped policy with every action branched (the offline corpus).")
    epochs: PositiveInt = Field(30, description="Epochs of SoftRankPO over the offline corpus.")
    lr: PositiveFloat = Field(1e-3, description="AdamW learning rate of SoftRankPO.")
    batch_size: PositiveInt = Field(64, description="States per optimizer step (both stages).")
    tau: PositiveFloat = Field(0.8, description="SoftRank temperature (the paper's best, 0.8).")
    beta: PositiveFloat = Field(0.1, description="Trust-region weight: implicit reward beta*log(pi/pi_sft).")
    lam: float = Field(0.01, ge=0, description="Entropy bonus weight.")
    checkpoint_every: PositiveInt = Field(20, description="Save the SoftRankPO state every N optimizer steps (and at the end).")
    eval_every: PositiveInt = Field(100, description="Deliberate the validation set with the policy every N SoftRankPO steps (action-rate curves).")

    @model_validator(mode="after")
    def _heads_divide(self) -> "MetaPolicyCfg":
        if self.hidden % self.heads:
            raise ValueError(f"metapolicy.hidden ({self.hidden}) must be a multiple of metapolicy.heads ({self.heads})")
        return self


class Config(_Strict):
    model: ModelCfg = Field(default_factory=ModelCfg)
    task: TaskCfg = Field(default_factory=TaskCfg)
    data: DataCfg = Field(default_factory=DataCfg)
    workflow: WorkflowCfg = Field(default_factory=WorkflowCfg)
    routing: Union[Literal["isolated", "shared"], dict[str, str]] = Field(
        "isolated", description="isolated (one LoRA per role type), shared (one LoRA), or {role: policy}; policy `base` = no adapter.")
    policies: dict[str, PolicyCfg] | None = Field(
        None, description="Policy table {name: {trainable}}; default: one trainable adapter per routed name.")
    lora: LoraCfg = Field(default_factory=LoraCfg)
    rollout: RolloutCfg = Field(default_factory=RolloutCfg)
    algo: AlgoCfg = Field(default_factory=AlgoCfg)
    optim: OptimCfg = Field(default_factory=OptimCfg)
    reward: RewardCfg = Field(default_factory=RewardCfg)
    train: TrainCfg = Field(default_factory=TrainCfg)
    alarms: AlarmsCfg = Field(default_factory=AlarmsCfg)
    metapolicy: MetaPolicyCfg | None = Field(
        None, description="Train a deliberation meta-policy (workflow deliberation) instead of LLM adapters; the agents stay frozen.")

    @model_validator(mode="after")
    def _self_consistent(self) -> "Config":
        # Cross-field checks that need only the config; the rest: rolecall.compose.checks.
        self._check_batch_sizes()
        if self.rollout.actors and self.rollout.engine == "vllm":
            raise ValueError("rollout.engine=vllm with rollout.actors: Ray rollout actors generate with the in-process "
                             "HF engine (vLLM inside actors is not built); set rollout.engine=hf or rollout.actors=0")
        return self

    def _check_batch_sizes(self) -> None:
        r, a = self.rollout, self.algo
        if r.group_size < 2:
            # Every estimator groups within one problem's samples and broadcasts the episode's
            # reward to its turns, so a group of one episode has zero spread: nothing would learn.
            raise ValueError(f"rollout.group_size: {r.group_size} gives every turn advantage 0 with algo.estimator "
                             f"{a.estimator!r} (groups compare the samples of one problem); allowed: >= 2")
        episodes = r.problems_per_step * r.group_size
        if a.mini_batches is not None and a.mini_batch_problems is not None:
            raise ValueError(f"algo.mini_batches ({a.mini_batches}) and algo.mini_batch_problems ({a.mini_batch_problems}) "
                             "are both set; allowed: one of them (mini_batch_problems is the paper's rule)")
        if a.mini_batches is not None and a.mini_batches > episodes:
            raise ValueError(f"algo.mini_batches: {a.mini_batches} is more than the {episodes} episodes of a step "
                             f"(rollout.problems_per_step {r.problems_per_step} x rollout.group_size {r.group_size}), "
                             f"so some mini-batches would be empty; allowed: 1..{episodes}")

    def mini_batch_rows(self) -> int | None:
        """Rows per PPO mini-batch (None: a fixed count of algo.mini_batches per iteration)."""
        if self.algo.mini_batches is not None:
            return None
        return (self.algo.mini_batch_problems or self.rollout.problems_per_step) * self.rollout.group_size

    def reward_cfg(self) -> "RewardCfg":
        """The reward section with `auto` choices made for this task (`TaskSource.math_checker`)."""
        if self.reward.math_checker != "auto":
            return self.reward
        return self.reward.model_copy(update={"math_checker": get_task(self.task.name).math_checker})

    def policy_optim(self) -> dict[str, OptimCfg]:
        """Each policy's optimizer settings: the run's `optim` with that policy's overrides."""
        out = {}
        for name, pol in (self.policies or {}).items():
            changes = {k: v for k, v in pol.optim.model_dump().items() if v is not None}
            if changes:
                out[name] = self.optim.model_copy(update=changes)
        return out

    def policy_lora(self) -> dict[str, dict]:
        """{policy: its LoRA overrides} for the policies with their own shape (keys r, alpha, dropout, target_modules)."""
        out = {}
        for name, pol in (self.policies or {}).items():
            changes = {k: v for k, v in pol.lora.model_dump().items() if v is not None}
            if changes:
                out[name] = changes
        return out

    def lora_of(self, policy: str) -> LoraCfg:
        """The LoRA shape `policy` trains with: the run's, with its own overrides."""
        return self.lora.model_copy(update=self.policy_lora().get(policy, {}))

    def policy_init(self) -> dict[str, str]:
        """{policy: init_from path} of the policies that start from an adapter trained elsewhere."""
        return {name: pol.init_from for name, pol in (self.policies or {}).items() if pol.init_from}

    def policy_table(self) -> dict[str, bool] | None:
        return None if self.policies is None else {k: v.trainable for k, v in self.policies.items()}


def dump_config(cfg: Config) -> str:
    """The config as the YAML a run directory keeps (config.yaml)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)

"""Which job and rank a stream's detections belong to: its path, its pod, its launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from sigwatch.config import ConfigProblemsError, load_config
from sigwatch.sources.identity import (
    JobIdentity,
    PathLabels,
    PathLabelsError,
    cri_identity,
    environment_identity,
    identify,
)

TRAINING = r"/var/log/training/(?P<job>[^/]+)/rank(?P<rank>\d+)\.log$"


class TestLabelsFromPath:
    def test_job_and_rank_come_from_the_named_groups(self) -> None:
        labels = PathLabels(TRAINING)

        found = labels.identify("/var/log/training/llama-70b-4471203/rank17.log")

        assert JobIdentity("llama-70b-4471203", "17") == found

    def test_a_path_the_regex_does_not_match_has_no_identity(self) -> None:
        assert PathLabels(TRAINING).identify("/var/log/training/notes.txt") is None

    def test_the_rank_group_is_optional(self) -> None:
        """One log per job with every rank in it: the ranks come from the line prefixes."""
        labels = PathLabels(r"/jobs/(?P<job>\d+)\.out$")

        assert JobIdentity("4471203") == labels.identify("/jobs/4471203.out")

    def test_control_characters_never_reach_a_label(self) -> None:
        labels = PathLabels(r"/jobs/(?P<job>[^/]+)/")

        found = labels.identify("/jobs/evil\x1b[31m\njob/x.log")

        assert found is not None
        assert "evil[31mjob" == found.job

    @pytest.mark.parametrize(("pattern", "reason"), [
        ("/jobs/(?P<job>[^/]+", "not a valid regular expression"),
        (r"/jobs/(?P<name>[^/]+)/rank(?P<rank>\d+)", "needs a named group 'job'"),
        (r"/jobs/(?P<job>[^/]+)/(?P<host>[^/]+)", "unknown named group(s) host"),
    ])
    def test_an_unusable_regex_is_refused_with_the_reason(self, pattern: str,
                                                          reason: str) -> None:
        with pytest.raises(PathLabelsError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            PathLabels(pattern)

    def test_a_bad_regex_in_the_config_names_the_file_the_field_and_the_reason(
            self, tmp_path: Path) -> None:
        config = tmp_path / "sigwatch.toml"
        config.write_text(
            "[[sources]]\nname = 'training'\npaths = ['/var/log/training/**/*.log']\n"
            "labels_from_path = '/var/log/training/(?P<jobid>[^/]+)/'\n", encoding="utf-8")

        with pytest.raises(ConfigProblemsError) as caught:
            load_config(config)

        [problem] = caught.value.errors
        assert str(config) == problem.file
        assert "sources[0].labels_from_path" == problem.field
        assert "needs a named group 'job'" in problem.reason

    def test_labels_from_path_is_refused_where_there_is_no_path(self, tmp_path: Path) -> None:
        config = tmp_path / "sigwatch.toml"
        config.write_text("[[sources]]\nname = 'kernel'\nkind = 'kmsg'\n"
                          f"labels_from_path = '{TRAINING}'\n", encoding="utf-8")

        with pytest.raises(ConfigProblemsError, match="files and pipe sources only"):
            load_config(config)


class TestPodLogPaths:
    def test_a_kubelet_pod_log_gives_namespace_pod_and_the_job_of_its_replicas(self) -> None:
        path = ("/var/log/pods/research_llama-pretrain-worker-3_7c0b3f57-9a61-4d3e-8d2c-"
                "2b9b8f0e1a77/pytorch/0.log")

        found = cri_identity(path)

        assert JobIdentity("research/llama-pretrain", None, "research",
                           "llama-pretrain-worker-3") == found

    @pytest.mark.parametrize(("pod", "job"), [
        ("llama-pretrain-master-0", "llama-pretrain"),   # Kubeflow PyTorchJob
        ("bert-mpi-launcher-0", "bert-mpi"),             # MPI operator
        ("train-7-x7k2p", "train"),                      # an indexed Job: index and hash
        ("train-x7k2p", "train"),                        # a Job pod's generated suffix
        ("trainer-set-12", "trainer-set"),               # a StatefulSet's index
        ("llama-train", "llama-train"),                  # no suffix: a word, not a hash
    ])
    def test_the_replica_suffix_is_what_pods_of_one_job_do_not_share(self, pod: str,
                                                                     job: str) -> None:
        path = f"/var/log/pods/ml_{pod}_0b9d6c8e-1111-2222-3333-444455556666/main/0.log"

        found = cri_identity(path)

        assert found is not None
        assert f"ml/{job}" == found.job

    def test_the_containers_folder_links_give_the_same(self) -> None:
        path = ("/var/log/containers/llama-pretrain-worker-3_research_pytorch-"
                + "a" * 64 + ".log")

        found = cri_identity(path)

        assert found is not None
        assert ("research/llama-pretrain", "llama-pretrain-worker-3") == (found.job, found.pod)

    def test_labels_from_path_wins_over_the_pod_layout_and_keeps_the_pod(self) -> None:
        path = ("/var/log/pods/research_llama-pretrain-worker-3_7c0b3f57-9a61-4d3e-8d2c-"
                "2b9b8f0e1a77/pytorch/0.log")
        labels = PathLabels(r"_(?P<job>llama-[a-z]+)-worker-(?P<rank>\d+)_")

        found = identify(path, labels)

        assert JobIdentity("llama-pretrain", "3", "research", "llama-pretrain-worker-3") == found

    def test_an_ordinary_path_has_no_identity(self) -> None:
        assert identify("/var/log/training/run.log", None) is None


class TestLauncherEnvironment:
    def test_slurm(self) -> None:
        env = {"SLURM_JOB_ID": "4471203", "SLURM_PROCID": "12", "SLURM_NODEID": "1"}

        assert JobIdentity("4471203", "12") == environment_identity(env)

    def test_torchrun_rank_is_the_global_rank_inside_a_slurm_job(self) -> None:
        """srun runs torchrun per node; each rank's RANK is its global rank, SLURM_PROCID
        only the node's task."""
        env = {"SLURM_JOB_ID": "4471203", "SLURM_PROCID": "1", "RANK": "9",
               "TORCHELASTIC_RUN_ID": "none"}

        assert JobIdentity("4471203", "9") == environment_identity(env)

    def test_torchrun_alone(self) -> None:
        env = {"TORCHELASTIC_RUN_ID": "llama-rdzv-17", "RANK": "3", "LOCAL_RANK": "3"}

        assert JobIdentity("llama-rdzv-17", "3") == environment_identity(env)

    @pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"])
    def test_mpi(self, variable: str) -> None:
        env = {"SIGWATCH_JOB": "bert-mpi", variable: "5"}

        assert JobIdentity("bert-mpi", "5") == environment_identity(env)

    def test_kubernetes_downward_api_and_an_indexed_job(self) -> None:
        env = {"POD_NAMESPACE": "research", "POD_NAME": "train-3-x7k2p", "JOB_NAME": "train",
               "JOB_COMPLETION_INDEX": "3"}

        assert JobIdentity("research/train", "3", "research", "train-3-x7k2p") == \
            environment_identity(env)

    def test_sigwatch_variables_override_the_launchers(self) -> None:
        env = {"SIGWATCH_JOB": "named-by-hand", "SIGWATCH_RANK": "0", "SLURM_JOB_ID": "1",
               "RANK": "7"}

        assert JobIdentity("named-by-hand", "0") == environment_identity(env)

    def test_nothing_known_is_an_empty_identity(self) -> None:
        found = environment_identity({"HOME": "/root", "RANK": "not-a-number"})

        assert JobIdentity() == found
        assert not found

"""The database: studies, trials, evaluations and the study lock, as typed records, at a schema version
that a database written by an earlier version is upgraded to (see upgrade.py).

    schema      the tables and the schema version
    records     the typed records and the rules on them (best_trial)
    lock        the study lock and its heartbeat
    reconnect   a read or write that lost its connection to the server, made again once it answers
    upgrade     the schema version of a database, and its upgrade in one transaction (Alembic: migrations/)
    health      a writer's check of the file before its first write, and its faults (full, read-only, damaged)
    database    the Store and database URLs
"""
from pipeline.store.database import DEFAULT_DB, Store, database_url, shown_database, sqlite_file
from pipeline.store.health import fault_in, watch
from pipeline.store.lock import LOCK_STALE_SECONDS, DatabaseBusy, LockLost, StudyLock, connect_args, is_busy
from pipeline.store.reconnect import Reconnected, Reconnecting
from pipeline.store.records import (CampaignRecord, EvaluationRecord, ImportanceRecord, ParameterShare, StudyRecord,
                                    TrialRecord, TrialStatus, Widening, best_trial, campaign_pick, model_pick,
                                    picked_trial, trial_budget, trials_completed, trials_ran)
from pipeline.store.schema import create_missing_tables, epochs, evaluations, studies, study_locks, trials
from pipeline.store.upgrade import SchemaUpgraded

__all__ = ["best_trial", "campaign_pick", "CampaignRecord", "connect_args", "create_missing_tables", "database_url",
           "DatabaseBusy", "DEFAULT_DB", "epochs", "EvaluationRecord", "evaluations", "fault_in", "ImportanceRecord",
           "is_busy", "LOCK_STALE_SECONDS", "LockLost", "model_pick", "ParameterShare", "picked_trial", "Reconnected",
           "Reconnecting", "SchemaUpgraded", "shown_database", "sqlite_file", "Store", "studies", "study_locks",
           "StudyLock", "StudyRecord", "TrialRecord", "TrialStatus", "trial_budget", "trials", "trials_completed",
           "trials_ran", "watch", "Widening"]

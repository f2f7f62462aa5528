from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[StatusCode]
    NO_SUCH_LEDGER: _ClassVar[StatusCode]
    NO_SUCH_ENTRY: _ClassVar[StatusCode]
    LEDGER_FENCED: _ClassVar[StatusCode]
    UNAUTHORIZED: _ClassVar[StatusCode]
    TOO_LARGE: _ClassVar[StatusCode]
    READ_ONLY: _ClassVar[StatusCode]
    INVALID_REQUEST: _ClassVar[StatusCode]
    INTERNAL: _ClassVar[StatusCode]
    UNKNOWN: _ClassVar[StatusCode]
OK: StatusCode
NO_SUCH_LEDGER: StatusCode
NO_SUCH_ENTRY: StatusCode
LEDGER_FENCED: StatusCode
UNAUTHORIZED: StatusCode
TOO_LARGE: StatusCode
READ_ONLY: StatusCode
INVALID_REQUEST: StatusCode
INTERNAL: StatusCode
UNKNOWN: StatusCode

class Entry(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "lac", "payload", "digest")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    lac: int
    payload: bytes
    digest: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., lac: _Optional[int] = ..., payload: _Optional[bytes] = ..., digest: _Optional[bytes] = ...) -> None: ...

class AddRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key", "recovery", "entries", "lac", "records", "record_lengths")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    recovery: bool
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    lac: int
    records: bytes
    record_lengths: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., recovery: _Optional[bool] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., lac: _Optional[int] = ..., records: _Optional[bytes] = ..., record_lengths: _Optional[bytes] = ...) -> None: ...

class AddResult(_message.Message):
    __slots__ = ("entry_id", "status")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    status: StatusCode
    def __init__(self, entry_id: _Optional[int] = ..., status: _Optional[_Union[StatusCode, str]] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("status", "message", "results", "packed")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    results: _containers.RepeatedCompositeFieldContainer[AddResult]
    packed: bool
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[AddResult, _Mapping]]] = ..., packed: _Optional[bool] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry", "last_entry", "entry_ids", "max_entries", "max_bytes", "fence", "master_key", "packed")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry: int
    last_entry: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    max_entries: int
    max_bytes: int
    fence: bool
    master_key: bytes
    packed: bool
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry: _Optional[int] = ..., last_entry: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ..., max_entries: _Optional[int] = ..., max_bytes: _Optional[int] = ..., fence: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., packed: _Optional[bool] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "message", "entries", "missing", "lac", "fenced", "records", "record_lengths")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    missing: _containers.RepeatedScalarFieldContainer[int]
    lac: int
    fenced: bool
    records: bytes
    record_lengths: bytes
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., missing: _Optional[_Iterable[int]] = ..., lac: _Optional[int] = ..., fenced: _Optional[bool] = ..., records: _Optional[bytes] = ..., record_lengths: _Optional[bytes] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id", "previous_lac", "wait_ms")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    previous_lac: int
    wait_ms: int
    def __init__(self, ledger_id: _Optional[int] = ..., previous_lac: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "message", "lac", "last_entry", "fenced")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    lac: int
    last_entry: int
    fenced: bool
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., lac: _Optional[int] = ..., last_entry: _Optional[int] = ..., fenced: _Optional[bool] = ...) -> None: ...

class HeldEntriesRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry", "last_entry", "verify_entries")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    VERIFY_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry: int
    last_entry: int
    verify_entries: int
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry: _Optional[int] = ..., last_entry: _Optional[int] = ..., verify_entries: _Optional[int] = ...) -> None: ...

class HeldEntriesResponse(_message.Message):
    __slots__ = ("status", "message", "range_first", "range_last")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIRST_FIELD_NUMBER: _ClassVar[int]
    RANGE_LAST_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    range_first: _containers.RepeatedScalarFieldContainer[int]
    range_last: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., range_first: _Optional[_Iterable[int]] = ..., range_last: _Optional[_Iterable[int]] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class FenceResponse(_message.Message):
    __slots__ = ("status", "message", "lac", "last_entry")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    lac: int
    last_entry: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., lac: _Optional[int] = ..., last_entry: _Optional[int] = ...) -> None: ...

class DeleteLedgerRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class DeleteLedgerResponse(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("status", "message", "bookie_id", "read_only", "ledgers", "disk_used_bytes", "disk_free_bytes", "max_entry_size", "version", "repair_state", "repair_ledgers_total", "repair_ledgers_left", "repair_limbo_ledgers", "repair_entries_copied", "repair_bytes_copied", "repair_error", "add_streams_open", "stream_add_requests", "stream_add_units", "stream_unit_parts")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRY_SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPAIR_STATE_FIELD_NUMBER: _ClassVar[int]
    REPAIR_LEDGERS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REPAIR_LEDGERS_LEFT_FIELD_NUMBER: _ClassVar[int]
    REPAIR_LIMBO_LEDGERS_FIELD_NUMBER: _ClassVar[int]
    REPAIR_ENTRIES_COPIED_FIELD_NUMBER: _ClassVar[int]
    REPAIR_BYTES_COPIED_FIELD_NUMBER: _ClassVar[int]
    REPAIR_ERROR_FIELD_NUMBER: _ClassVar[int]
    ADD_STREAMS_OPEN_FIELD_NUMBER: _ClassVar[int]
    STREAM_ADD_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STREAM_ADD_UNITS_FIELD_NUMBER: _ClassVar[int]
    STREAM_UNIT_PARTS_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    bookie_id: str
    read_only: bool
    ledgers: int
    disk_used_bytes: int
    disk_free_bytes: int
    max_entry_size: int
    version: str
    repair_state: str
    repair_ledgers_total: int
    repair_ledgers_left: int
    repair_limbo_ledgers: int
    repair_entries_copied: int
    repair_bytes_copied: int
    repair_error: str
    add_streams_open: int
    stream_add_requests: int
    stream_add_units: int
    stream_unit_parts: int
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ..., ledgers: _Optional[int] = ..., disk_used_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., max_entry_size: _Optional[int] = ..., version: _Optional[str] = ..., repair_state: _Optional[str] = ..., repair_ledgers_total: _Optional[int] = ..., repair_ledgers_left: _Optional[int] = ..., repair_limbo_ledgers: _Optional[int] = ..., repair_entries_copied: _Optional[int] = ..., repair_bytes_copied: _Optional[int] = ..., repair_error: _Optional[str] = ..., add_streams_open: _Optional[int] = ..., stream_add_requests: _Optional[int] = ..., stream_add_units: _Optional[int] = ..., stream_unit_parts: _Optional[int] = ...) -> None: ...

class MasterKeyRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class MasterKeyResponse(_message.Message):
    __slots__ = ("status", "message", "master_key")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    status: StatusCode
    message: str
    master_key: bytes
    def __init__(self, status: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class AddStreamRequest(_message.Message):
    __slots__ = ("request_id", "requests", "adds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ADDS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    requests: _containers.RepeatedCompositeFieldContainer[AddRequest]
    adds: LedgerAdds
    def __init__(self, request_id: _Optional[int] = ..., requests: _Optional[_Iterable[_Union[AddRequest, _Mapping]]] = ..., adds: _Optional[_Union[LedgerAdds, _Mapping]] = ...) -> None: ...

class AddStreamResponse(_message.Message):
    __slots__ = ("request_id", "responses", "adds_status", "adds_message", "reads_adds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    ADDS_STATUS_FIELD_NUMBER: _ClassVar[int]
    ADDS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    READS_ADDS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    responses: _containers.RepeatedCompositeFieldContainer[AddResponse]
    adds_status: _containers.RepeatedScalarFieldContainer[StatusCode]
    adds_message: _containers.RepeatedScalarFieldContainer[str]
    reads_adds: bool
    def __init__(self, request_id: _Optional[int] = ..., responses: _Optional[_Iterable[_Union[AddResponse, _Mapping]]] = ..., adds_status: _Optional[_Iterable[_Union[StatusCode, str]]] = ..., adds_message: _Optional[_Iterable[str]] = ..., reads_adds: _Optional[bool] = ...) -> None: ...

class LedgerAdds(_message.Message):
    __slots__ = ("records", "record_lengths", "ledger_ids", "counts", "master_keys", "lacs")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    LEDGER_IDS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEYS_FIELD_NUMBER: _ClassVar[int]
    LACS_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    record_lengths: bytes
    ledger_ids: _containers.RepeatedScalarFieldContainer[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    master_keys: _containers.RepeatedScalarFieldContainer[bytes]
    lacs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, records: _Optional[bytes] = ..., record_lengths: _Optional[bytes] = ..., ledger_ids: _Optional[_Iterable[int]] = ..., counts: _Optional[_Iterable[int]] = ..., master_keys: _Optional[_Iterable[bytes]] = ..., lacs: _Optional[_Iterable[int]] = ...) -> None: ...

"""A meter provider that stands in for one made later: `run` makes its SDK meter provider, its
readers and their exporters (the metrics SDK, and OTLP's protobuf and HTTP client: about 25 ms
of imports) once its agent has started, not before.

Meters and instruments are asked for as usual, through every method of the OTel Metrics API's
`Meter`. Until `hand_over(provider)`, the measurements of synchronous instruments (counter,
up-down counter, histogram, gauge) are held, in order; at the hand-over every instrument is
made on the real provider (observable ones with their callbacks, which read running totals:
nothing they count is lost) and the held measurements are recorded into it. After it, meters
and instruments are the real provider's.

The API's own proxy provider (what `get_meter_provider()` returns before one is set) does the
hand-over too, but drops what is measured before it: the metrics of `run`'s pre-start hooks.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from opentelemetry.context import Context
from opentelemetry.metrics import (
    CallbackT,
    Counter,
    Histogram,
    Meter,
    MeterProvider,
    NoOpObservableCounter,
    NoOpObservableGauge,
    NoOpObservableUpDownCounter,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    Synchronous,
    UpDownCounter,
)
from opentelemetry.metrics import _Gauge as Gauge  # the API exports its Gauge by this name
from opentelemetry.util.types import Attributes

__all__ = ["MAX_HELD", "MeterProviderLater"]

# Measurements held before the hand-over, across all instruments: `run` makes a handful (its
# first phases and pre-start hooks); a provider never handed over must not grow without bound.
MAX_HELD = 100_000

_Measurement = tuple[float, Attributes, Context | None]
_RealT = TypeVar("_RealT", bound=Synchronous)


class MeterProviderLater(MeterProvider):
    """Meters of a provider not made yet (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards the hand-over and every held measurement
        self._real: MeterProvider | None = None
        self._meters: list[_MeterLater] = []
        self.held = 0  # measurements held so far (at most MAX_HELD)
        self.dropped = 0  # measurements past MAX_HELD, never recorded

    @property
    def real(self) -> MeterProvider | None:
        """The provider handed over, once it was."""
        return self._real

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes | None = None,
    ) -> Meter:
        """A meter whose instruments are made on the real provider at the hand-over (after
        it: the real provider's meter)."""
        with self.lock:
            if self._real is None:
                meter = _MeterLater(self, name, version, schema_url, attributes)
                self._meters.append(meter)
                return meter
        return self._real.get_meter(name, version, schema_url, attributes)

    def hand_over(self, provider: MeterProvider) -> None:
        """Make every instrument asked for so far on `provider`, record what was held into
        it, and send everything after to it. Once; later calls are ignored."""
        with self.lock:
            if self._real is not None:
                return
            for meter in self._meters:
                meter.hand_over(provider)
            self._meters = []
            self._real = provider

    def admit(self) -> bool:
        """Count one more held measurement; False (and counted as dropped) past `MAX_HELD`.
        Called with `lock` held."""
        if self.held >= MAX_HELD:
            self.dropped += 1
            return False
        self.held += 1
        return True


class _MeterLater(Meter):
    """A meter whose instruments are made on the real provider at the hand-over.

    It derives from the abstract `Meter`, not `NoOpMeter`: a method the API adds is then
    inherited as the API's default, never silently a no-op of ours."""

    def __init__(
        self,
        provider: MeterProviderLater,
        name: str,
        version: str | None,
        schema_url: str | None,
        attributes: Attributes | None,
    ) -> None:
        super().__init__(name, version=version, schema_url=schema_url)
        self._provider = provider
        self._attributes = attributes
        self._makers: list[Callable[[Meter], object]] = []  # run on the real meter, in order
        self._real: Meter | None = None

    def hand_over(self, provider: MeterProvider) -> None:
        """Make this meter's instruments on `provider`. Called with the provider's lock held."""
        meter = provider.get_meter(self.name, self.version, self.schema_url, self._attributes)
        for make in self._makers:
            make(meter)
        self._makers = []
        self._real = meter

    def _later(self, make: Callable[[Meter], object]) -> None:
        # An instrument asked of this meter after the hand-over (a library that kept the
        # meter) is made on the real one at once.
        with self._provider.lock:
            if self._real is None:
                self._makers.append(make)
                return
            real = self._real
        make(real)

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        """A counter whose increments before the hand-over are held."""
        counter = _CounterLater(self._provider, name, unit, description)
        self._later(counter.make)
        return counter

    def create_up_down_counter(
        self, name: str, unit: str = "", description: str = ""
    ) -> UpDownCounter:
        """An up-down counter whose changes before the hand-over are held."""
        counter = _UpDownCounterLater(self._provider, name, unit, description)
        self._later(counter.make)
        return counter

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        *,
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> Histogram:
        """A histogram whose records before the hand-over are held."""
        histogram = _HistogramLater(
            self._provider, name, unit, description, explicit_bucket_boundaries_advisory
        )
        self._later(histogram.make)
        return histogram

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> Gauge:
        """A gauge whose values set before the hand-over are held (the last one wins)."""
        gauge = _GaugeLater(self._provider, name, unit, description)
        self._later(gauge.make)
        return gauge

    # Observable instruments have nothing to hold: no reader exists to call their callbacks
    # before the hand-over. The instrument returned has no method a caller uses.

    def create_observable_counter(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableCounter:
        """An observable counter, made with its callbacks at the hand-over."""
        self._later(
            lambda meter: meter.create_observable_counter(name, callbacks, unit, description)
        )
        return NoOpObservableCounter(name, callbacks, unit=unit, description=description)

    def create_observable_up_down_counter(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableUpDownCounter:
        """An observable up-down counter, made with its callbacks at the hand-over."""
        self._later(
            lambda meter: meter.create_observable_up_down_counter(
                name, callbacks, unit, description
            )
        )
        return NoOpObservableUpDownCounter(name, callbacks, unit=unit, description=description)

    def create_observable_gauge(
        self,
        name: str,
        callbacks: Sequence[CallbackT] | None = None,
        unit: str = "",
        description: str = "",
    ) -> ObservableGauge:
        """An observable gauge, made with its callbacks at the hand-over."""
        self._later(lambda meter: meter.create_observable_gauge(name, callbacks, unit, description))
        return NoOpObservableGauge(name, callbacks, unit=unit, description=description)


class _SyncLater(Synchronous, Generic[_RealT]):
    """A synchronous instrument made at the hand-over; what it measured before is held."""

    def __init__(
        self, provider: MeterProviderLater, name: str, unit: str, description: str
    ) -> None:
        self._provider = provider
        self._name, self._unit, self._description = name, unit, description
        self._real: _RealT | None = None
        self._held: list[_Measurement] = []

    def make(self, meter: Meter) -> None:
        """Make the real instrument on `meter` and record what was held into it. Called
        with the provider's lock held, so no measurement is held meanwhile."""
        real = self._create(meter)
        for measurement in self._held:
            self._record(real, *measurement)
        self._held = []
        self._real = real

    def _measure(self, amount: float, attributes: Attributes, context: Context | None) -> None:
        real = self._real
        if real is None:
            with self._provider.lock:
                real = self._real
                if real is None:
                    if self._provider.admit():
                        self._held.append((amount, attributes, context))
                    return
        self._record(real, amount, attributes, context)

    @abstractmethod
    def _create(self, meter: Meter) -> _RealT:
        """The real instrument, made on `meter`."""

    @staticmethod
    @abstractmethod
    def _record(
        real: _RealT, amount: float, attributes: Attributes, context: Context | None
    ) -> None:
        """Record one measurement into the real instrument."""


class _CounterLater(_SyncLater[Counter], Counter):
    def _create(self, meter: Meter) -> Counter:
        return meter.create_counter(self._name, self._unit, self._description)

    @staticmethod
    def _record(
        real: Counter, amount: float, attributes: Attributes, context: Context | None
    ) -> None:
        real.add(amount, attributes, context)

    def add(
        self, amount: float, attributes: Attributes = None, context: Context | None = None
    ) -> None:
        """Add `amount` (held until the hand-over)."""
        self._measure(amount, attributes, context)


class _UpDownCounterLater(_SyncLater[UpDownCounter], UpDownCounter):
    def _create(self, meter: Meter) -> UpDownCounter:
        return meter.create_up_down_counter(self._name, self._unit, self._description)

    @staticmethod
    def _record(
        real: UpDownCounter, amount: float, attributes: Attributes, context: Context | None
    ) -> None:
        real.add(amount, attributes, context)

    def add(
        self, amount: float, attributes: Attributes = None, context: Context | None = None
    ) -> None:
        """Add `amount`, which may be negative (held until the hand-over)."""
        self._measure(amount, attributes, context)


class _HistogramLater(_SyncLater[Histogram], Histogram):
    def __init__(
        self,
        provider: MeterProviderLater,
        name: str,
        unit: str,
        description: str,
        boundaries: Sequence[float] | None,
    ) -> None:
        super().__init__(provider, name, unit, description)
        self._boundaries = boundaries

    def _create(self, meter: Meter) -> Histogram:
        return meter.create_histogram(
            self._name,
            self._unit,
            self._description,
            explicit_bucket_boundaries_advisory=self._boundaries,
        )

    @staticmethod
    def _record(
        real: Histogram, amount: float, attributes: Attributes, context: Context | None
    ) -> None:
        real.record(amount, attributes, context)

    def record(
        self, amount: float, attributes: Attributes = None, context: Context | None = None
    ) -> None:
        """Record `amount` (held until the hand-over)."""
        self._measure(amount, attributes, context)


class _GaugeLater(_SyncLater[Gauge], Gauge):
    def _create(self, meter: Meter) -> Gauge:
        return meter.create_gauge(self._name, self._unit, self._description)

    @staticmethod
    def _record(
        real: Gauge, amount: float, attributes: Attributes, context: Context | None
    ) -> None:
        real.set(amount, attributes, context)

    def set(
        self, amount: float, attributes: Attributes = None, context: Context | None = None
    ) -> None:
        """Set the current value (held until the hand-over)."""
        self._measure(amount, attributes, context)

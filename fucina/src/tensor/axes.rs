//! Axis names as types, and the type-level list algebra behind compile-time axis checks.
//!
//! An axis is a type implementing [`Axis`] (declared with `axis!`); it carries a
//! type-level id (its name encoded as a `typenum` integer) so that axis equality
//! can be decided by trait resolution. A tensor's axes are a tuple of axis types
//! ([`Axes`]); the algebra works on the equivalent cons-list ([`Cons`]/[`Nil`]).
//! Each failed check ends in a trait whose `#[diagnostic::on_unimplemented]`
//! message names the axis and the tensor's axes in plain words.

use std::marker::PhantomData;
use typenum::{Bit, IsEqual, B0, B1};

/// A named axis. Declare new ones with `fucina::axis!(pub name)`.
pub trait Axis: AxisSet + Send + Sync + 'static {
    /// The axis name, as written in `axes![...]`.
    const NAME: &'static str;
    /// The name encoded as a type-level integer; equal names give equal ids.
    type Id;
}

/// The empty axis list.
pub struct Nil;
/// An axis list with head `H` and tail `T`.
pub struct Cons<H, T>(PhantomData<(H, T)>);

/// A type-level list of axes.
pub trait List: 'static {
    /// Number of axes.
    const LEN: usize;
    /// Appends the axis names in order.
    fn push_names(out: &mut Vec<&'static str>);
}

impl List for Nil {
    const LEN: usize = 0;
    fn push_names(_: &mut Vec<&'static str>) {}
}

impl<H: Axis, T: List> List for Cons<H, T> {
    const LEN: usize = 1 + T::LEN;
    fn push_names(out: &mut Vec<&'static str>) {
        out.push(H::NAME);
        T::push_names(out);
    }
}

/// Something that names an ordered list of axes: a tuple of axes, or one axis.
pub trait AxisSet: 'static {
    /// The axes as a cons-list.
    type List: List;
    /// The axis names in order.
    fn names() -> Vec<&'static str> {
        let mut v = Vec::with_capacity(Self::List::LEN);
        Self::List::push_names(&mut v);
        v
    }
}

/// The axes of a tensor type: a tuple of axis types, written with `axes![...]`.
pub trait Axes: AxisSet + Send + Sync {}

/// Converts a computed cons-list back to the tuple used in `Tensor<...>`.
pub trait ToTuple {
    /// The tuple type.
    type Tuple: Axes;
}

macro_rules! tuple_axes {
    ($( ( $($t:ident),* ) ),* $(,)?) => {$(
        impl<$($t: Axis + Send + Sync),*> AxisSet for ($($t,)*) {
            type List = tuple_axes!(@list $($t),*);
        }
        impl<$($t: Axis + Send + Sync),*> Axes for ($($t,)*) {}
        impl<$($t: Axis + Send + Sync),*> ToTuple for tuple_axes!(@list $($t),*) {
            type Tuple = ($($t,)*);
        }
    )*};
    (@list) => { Nil };
    (@list $h:ident $(, $t:ident)*) => { Cons<$h, tuple_axes!(@list $($t),*)> };
}

tuple_axes!(
    (),
    (A0),
    (A0, A1),
    (A0, A1, A2),
    (A0, A1, A2, A3),
    (A0, A1, A2, A3, A4),
    (A0, A1, A2, A3, A4, A5),
    (A0, A1, A2, A3, A4, A5, A6),
    (A0, A1, A2, A3, A4, A5, A6, A7),
);

/// The tuple for a computed list.
pub type TupleOf<L> = <L as ToTuple>::Tuple;

// ---------------------------------------------------------------- membership

/// `Out` is `B1` when axis `X` is in the list.
pub trait Has<X: Axis> {
    /// `B1` or `B0`.
    type Out: Bit;
}

#[doc(hidden)]
pub trait HasStep<X: Axis, E> {
    type Out: Bit;
}

impl<X: Axis> Has<X> for Nil {
    type Out = B0;
}

impl<X: Axis, H: Axis, T> Has<X> for Cons<H, T>
where
    H::Id: IsEqual<X::Id>,
    Cons<H, T>: HasStep<X, <H::Id as IsEqual<X::Id>>::Output>,
{
    type Out = <Cons<H, T> as HasStep<X, <H::Id as IsEqual<X::Id>>::Output>>::Out;
}

impl<X: Axis, H, T> HasStep<X, B1> for Cons<H, T> {
    type Out = B1;
}

impl<X: Axis, H, T: Has<X>> HasStep<X, B0> for Cons<H, T> {
    type Out = <T as Has<X>>::Out;
}

// ---------------------------------------------------------------- removal

/// The list without axis `X`.
pub trait Remove<X: Axis> {
    /// The remaining list.
    type Out;
}

#[doc(hidden)]
pub trait RemoveStep<X: Axis, E> {
    type Out;
}

impl<X: Axis> Remove<X> for Nil {
    type Out = Nil;
}

impl<X: Axis, H: Axis, T> Remove<X> for Cons<H, T>
where
    H::Id: IsEqual<X::Id>,
    Cons<H, T>: RemoveStep<X, <H::Id as IsEqual<X::Id>>::Output>,
{
    type Out = <Cons<H, T> as RemoveStep<X, <H::Id as IsEqual<X::Id>>::Output>>::Out;
}

impl<X: Axis, H, T: Remove<X>> RemoveStep<X, B1> for Cons<H, T> {
    type Out = <T as Remove<X>>::Out;
}

impl<X: Axis, H, T: Remove<X>> RemoveStep<X, B0> for Cons<H, T> {
    type Out = Cons<H, <T as Remove<X>>::Out>;
}

/// The list without every axis of list `L`.
pub trait RemoveAll<L> {
    /// The remaining list.
    type Out;
}

impl<S> RemoveAll<Nil> for S {
    type Out = S;
}

impl<S, X: Axis, T> RemoveAll<Cons<X, T>> for S
where
    S: Remove<X>,
    <S as Remove<X>>::Out: RemoveAll<T>,
{
    type Out = <<S as Remove<X>>::Out as RemoveAll<T>>::Out;
}

// ---------------------------------------------------------------- replacement

/// The list with axis `X` replaced by `Y` in place.
pub trait Replace<X: Axis, Y: Axis> {
    /// The new list.
    type Out;
}

#[doc(hidden)]
pub trait ReplaceStep<X: Axis, Y: Axis, E> {
    type Out;
}

impl<X: Axis, Y: Axis> Replace<X, Y> for Nil {
    type Out = Nil;
}

impl<X: Axis, Y: Axis, H: Axis, T> Replace<X, Y> for Cons<H, T>
where
    H::Id: IsEqual<X::Id>,
    Cons<H, T>: ReplaceStep<X, Y, <H::Id as IsEqual<X::Id>>::Output>,
{
    type Out = <Cons<H, T> as ReplaceStep<X, Y, <H::Id as IsEqual<X::Id>>::Output>>::Out;
}

impl<X: Axis, Y: Axis, H, T: Replace<X, Y>> ReplaceStep<X, Y, B1> for Cons<H, T> {
    type Out = Cons<Y, <T as Replace<X, Y>>::Out>;
}

impl<X: Axis, Y: Axis, H, T: Replace<X, Y>> ReplaceStep<X, Y, B0> for Cons<H, T> {
    type Out = Cons<H, <T as Replace<X, Y>>::Out>;
}

// ---------------------------------------------------------------- concatenation

/// The list followed by list `R`.
pub trait Concat<R> {
    /// The joined list.
    type Out;
}

impl<R> Concat<R> for Nil {
    type Out = R;
}

impl<H, T: Concat<R>, R> Concat<R> for Cons<H, T> {
    type Out = Cons<H, <T as Concat<R>>::Out>;
}

// ---------------------------------------------------------------- readable checks

macro_rules! presence_check {
    (
        $(#[$m:meta])* all: $all:ident, leaf: $leaf:ident, want: $want:ty,
        message = $msg:literal, label = $label:literal, note = $note:literal
    ) => {
        #[doc(hidden)]
        #[diagnostic::on_unimplemented(message = $msg, label = $label, note = $note)]
        pub trait $leaf<X, Shown> {}
        #[diagnostic::do_not_recommend]
        impl<X, Shown> $leaf<X, Shown> for $want {}

        $(#[$m])*
        pub trait $all<L, Shown> {}
        impl<L, Shown> $all<L, Shown> for Nil {}
        impl<L, Shown, X: Axis, T> $all<L, Shown> for Cons<X, T>
        where
            L: Has<X>,
            <L as Has<X>>::Out: $leaf<X, Shown>,
            T: $all<L, Shown>,
        {
        }
    };
}

presence_check! {
    /// Every axis of the list is an axis of the tensor `Shown`.
    all: AxesOf, leaf: AxisOfTensor, want: B1,
    message = "axis `{X}` is not an axis of the tensor `Tensor<{Shown}>`",
    label = "this op names an axis the tensor does not have",
    note = "the axes of a tensor are part of its type: check the axis name, or rename/permute first"
}

presence_check! {
    /// Every contracted axis is an axis of the left operand `Shown`.
    all: ContractedInLeft, leaf: ContractedAxisInLeft, want: B1,
    message = "cannot contract over `{X}`: the left operand `Tensor<{Shown}>` has no such axis",
    label = "contraction over an axis the left operand lacks",
    note = "both operands of a contraction must have every contracted axis"
}

presence_check! {
    /// Every contracted axis is an axis of the right operand `Shown`.
    all: ContractedInRight, leaf: ContractedAxisInRight, want: B1,
    message = "cannot contract over `{X}`: the right operand `Tensor<{Shown}>` has no such axis",
    label = "contraction over an axis the right operand lacks",
    note = "both operands of a contraction must have every contracted axis"
}

presence_check! {
    /// Every axis of the right operand is an axis of the left operand `Shown` (broadcasting).
    all: BroadcastsInto, leaf: BroadcastAxis, want: B1,
    message = "cannot broadcast: axis `{X}` of the right operand is not an axis of the left operand `Tensor<{Shown}>`",
    label = "incompatible axis sets",
    note = "in `a.add(&b)` every axis of `b` must be an axis of `a`; the result has the axes of `a`"
}

presence_check! {
    /// Every axis of the tensor appears in the target layout `Shown`.
    all: CoveredBy, leaf: AxisInLayout, want: B1,
    message = "axis `{X}` of the tensor is missing from the target layout `{Shown}`",
    label = "a permutation must list every axis of the tensor exactly once",
    note = "to drop an axis, reduce over it (sum/mean/max) instead"
}

presence_check! {
    /// No axis of the list is an axis of the tensor `Shown` (used for renames).
    all: AbsentFrom, leaf: AxisNotYetIn, want: B0,
    message = "axis `{X}` is already an axis of the tensor `Tensor<{Shown}>`",
    label = "renaming onto an existing axis would duplicate it",
    note = "each axis may appear once in a tensor type"
}

/// The axes of `A` after removing the axes of `S`: the result of a reduction.
pub type Reduced<A, S> = TupleOf<<<A as AxisSet>::List as RemoveAll<<S as AxisSet>::List>>::Out>;

/// The axes of `A` with `X` renamed to `Y`.
pub type Renamed<A, X, Y> = TupleOf<<<A as AxisSet>::List as Replace<X, Y>>::Out>;

/// The axes of `A` followed by the axes of `B`.
pub type Joined<A, B> = TupleOf<<<A as AxisSet>::List as Concat<<B as AxisSet>::List>>::Out>;

/// The result axes of contracting `A` with `B` over `C`:
/// `A`'s axes without `C`, then `B`'s axes that are neither in `A` nor in `C`.
pub type Contracted<A, B, C> = TupleOf<
    <<<A as AxisSet>::List as RemoveAll<<C as AxisSet>::List>>::Out as Concat<
        <<<B as AxisSet>::List as RemoveAll<<A as AxisSet>::List>>::Out as RemoveAll<<C as AxisSet>::List>>::Out,
    >>::Out,
>;

/// `Self`'s axes can be reduced over the axes of `S`.
pub trait CanReduce<S: AxisSet>: Axes {
    /// The remaining axes.
    type Out: Axes;
}

impl<A: Axes, S: AxisSet> CanReduce<S> for A
where
    S::List: AxesOf<A::List, A>,
    A::List: RemoveAll<S::List>,
    <A::List as RemoveAll<S::List>>::Out: ToTuple,
{
    type Out = TupleOf<<A::List as RemoveAll<S::List>>::Out>;
}

/// `Self` (the left operand) contracts with `B` over the axes `C`.
pub trait CanContract<B: Axes, C: AxisSet>: Axes {
    /// The result axes.
    type Out: Axes;
}

impl<A: Axes, B: Axes, C: AxisSet> CanContract<B, C> for A
where
    C::List: ContractedInLeft<A::List, A> + ContractedInRight<B::List, B>,
    A::List: RemoveAll<C::List>,
    B::List: RemoveAll<A::List>,
    <B::List as RemoveAll<A::List>>::Out: RemoveAll<C::List>,
    <A::List as RemoveAll<C::List>>::Out: Concat<<<B::List as RemoveAll<A::List>>::Out as RemoveAll<C::List>>::Out>,
    <<A::List as RemoveAll<C::List>>::Out as Concat<
        <<B::List as RemoveAll<A::List>>::Out as RemoveAll<C::List>>::Out,
    >>::Out: ToTuple,
{
    type Out = Contracted<A, B, C>;
}

/// `B` broadcasts into `Self`: every axis of `B` is an axis of `Self`.
pub trait BroadcastFrom<B: Axes>: Axes {}

impl<A: Axes, B: Axes> BroadcastFrom<B> for A where B::List: BroadcastsInto<A::List, A> {}

/// `Self` can be permuted into the layout `B` (same axes, any order).
pub trait PermuteTo<B: Axes>: Axes {}

impl<A: Axes, B: Axes> PermuteTo<B> for A
where
    B::List: AxesOf<A::List, A>,
    A::List: CoveredBy<B::List, B>,
{
}

/// `Self` has every axis of `S` (for ops over a named axis that keep the shape).
pub trait HasAxes<S: AxisSet>: Axes {}

impl<A: Axes, S: AxisSet> HasAxes<S> for A where S::List: AxesOf<A::List, A> {}

/// Axis `X` of `Self` can be renamed to `Y`.
pub trait CanRename<X: Axis, Y: Axis>: Axes {
    /// The renamed axes.
    type Out: Axes;
}

impl<A: Axes, X: Axis, Y: Axis> CanRename<X, Y> for A
where
    Cons<X, Nil>: AxesOf<A::List, A>,
    Cons<Y, Nil>: AbsentFrom<A::List, A>,
    A::List: Replace<X, Y>,
    <A::List as Replace<X, Y>>::Out: ToTuple,
{
    type Out = Renamed<A, X, Y>;
}

/// `Self` followed by the axes of `B`, none shared (e.g. embedding lookup adds a feature axis).
pub trait CanJoin<B: Axes>: Axes {
    /// The joined axes.
    type Out: Axes;
}

impl<A: Axes, B: Axes> CanJoin<B> for A
where
    B::List: AbsentFrom<A::List, A>,
    A::List: Concat<B::List>,
    <A::List as Concat<B::List>>::Out: ToTuple,
{
    type Out = Joined<A, B>;
}

//! Axis names as types, and the type-level list algebra behind compile-time axis checks.
//!
//! An axis is a type implementing [`Axis`] (declared with `axis!`); it carries a
//! type-level id (its name encoded as a `typenum` integer) so that axis equality
//! can be decided by trait resolution. A tensor's axes are a tuple of axis types
//! ([`Axes`]); the algebra works on the equivalent cons-list ([`Cons`]/[`Nil`]).
//! Each failed check is reported as the public bound that failed, whose
//! `#[diagnostic::on_unimplemented]` message names the axes and the tensor in plain words.

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
//
// The membership checks below are plumbing: every impl of them carries
// `#[diagnostic::do_not_recommend]`, and so do the impls of the public bound traits
// further down. A failed check is then reported as the public bound that was not met
// (`(batch, hidden): CanReduce<seq>`), with that trait's `on_unimplemented` message in
// plain words, and none of the cons lists, `B0`/`B1` bits or intermediate traits appear
// in the notes.

#[doc(hidden)]
pub trait IsSet {}
#[diagnostic::do_not_recommend]
impl IsSet for B1 {}

#[doc(hidden)]
pub trait IsUnset {}
#[diagnostic::do_not_recommend]
impl IsUnset for B0 {}

/// Every axis of the list is in the list `L`.
#[doc(hidden)]
pub trait AllIn<L> {}
#[diagnostic::do_not_recommend]
impl<L> AllIn<L> for Nil {}
#[diagnostic::do_not_recommend]
impl<L, X: Axis, T> AllIn<L> for Cons<X, T>
where
    L: Has<X>,
    <L as Has<X>>::Out: IsSet,
    T: AllIn<L>,
{
}

/// No axis of the list is in the list `L`.
#[doc(hidden)]
pub trait NoneIn<L> {}
#[diagnostic::do_not_recommend]
impl<L> NoneIn<L> for Nil {}
#[diagnostic::do_not_recommend]
impl<L, X: Axis, T> NoneIn<L> for Cons<X, T>
where
    L: Has<X>,
    <L as Has<X>>::Out: IsUnset,
    T: NoneIn<L>,
{
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

/// `Self`'s axes can be reduced over the axes of `S` (every axis of `S` is an axis of `Self`).
#[diagnostic::on_unimplemented(
    message = "`{S}` is not among the axes of the tensor `Tensor<{Self}>`",
    label = "this op names an axis the tensor does not have",
    note = "the axes of a tensor are part of its type: check the axis name, or rename/permute first"
)]
pub trait CanReduce<S: AxisSet>: Axes {
    /// The remaining axes.
    type Out: Axes;
}

#[diagnostic::do_not_recommend]
impl<A: Axes, S: AxisSet> CanReduce<S> for A
where
    S::List: AllIn<A::List>,
    A::List: RemoveAll<S::List>,
    <A::List as RemoveAll<S::List>>::Out: ToTuple,
{
    type Out = TupleOf<<A::List as RemoveAll<S::List>>::Out>;
}

/// `Self` is the left operand of a contraction over `C`: it has every axis of `C`.
#[diagnostic::on_unimplemented(
    message = "cannot contract over `{C}`: the left operand `Tensor<{Self}>` lacks an axis of it",
    label = "contraction over an axis the left operand lacks",
    note = "both operands of a contraction must have every contracted axis"
)]
pub trait ContractsLeft<C: AxisSet>: Axes {}

#[diagnostic::do_not_recommend]
impl<A: Axes, C: AxisSet> ContractsLeft<C> for A where C::List: AllIn<A::List> {}

/// `Self` is the right operand of a contraction over `C`: it has every axis of `C`.
#[diagnostic::on_unimplemented(
    message = "cannot contract over `{C}`: the right operand `Tensor<{Self}>` lacks an axis of it",
    label = "contraction over an axis the right operand lacks",
    note = "both operands of a contraction must have every contracted axis"
)]
pub trait ContractsRight<C: AxisSet>: Axes {}

#[diagnostic::do_not_recommend]
impl<A: Axes, C: AxisSet> ContractsRight<C> for A where C::List: AllIn<A::List> {}

/// `Self` (the left operand) contracts with `B` over the axes `C`.
#[diagnostic::on_unimplemented(
    message = "cannot contract `Tensor<{Self}>` over `{C}`: an operand lacks a contracted axis",
    label = "contraction over an axis an operand lacks",
    note = "both operands of a contraction must have every contracted axis"
)]
pub trait CanContract<B: Axes, C: AxisSet>: Axes {
    /// The result axes.
    type Out: Axes;
}

impl<A: Axes, B: Axes, C: AxisSet> CanContract<B, C> for A
where
    A: ContractsLeft<C>,
    B: ContractsRight<C>,
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
#[diagnostic::on_unimplemented(
    message = "cannot broadcast `Tensor<{B}>` into `Tensor<{Self}>`: the right operand has an axis the left one lacks",
    label = "incompatible axis sets",
    note = "in `a.add(&b)` every axis of `b` must be an axis of `a`; the result has the axes of `a`"
)]
pub trait BroadcastFrom<B: Axes>: Axes {}

#[diagnostic::do_not_recommend]
impl<A: Axes, B: Axes> BroadcastFrom<B> for A where B::List: AllIn<A::List> {}

/// `Self` can be permuted into the layout `B` (same axes, any order).
#[diagnostic::on_unimplemented(
    message = "cannot permute `Tensor<{Self}>` into `Tensor<{B}>`: the two have different axes",
    label = "a permutation must list every axis of the tensor exactly once",
    note = "to drop an axis, reduce over it (sum/mean/max); to add one, use unsqueeze or broadcast_to"
)]
pub trait PermuteTo<B: Axes>: Axes {}

#[diagnostic::do_not_recommend]
impl<A: Axes, B: Axes> PermuteTo<B> for A
where
    B::List: AllIn<A::List>,
    A::List: AllIn<B::List>,
{
}

/// `Self` has every axis of `S` (for ops over a named axis that keep the shape).
#[diagnostic::on_unimplemented(
    message = "`{S}` is not among the axes of the tensor `Tensor<{Self}>`",
    label = "this op names an axis the tensor does not have",
    note = "the axes of a tensor are part of its type: check the axis name, or rename/permute first"
)]
pub trait HasAxes<S: AxisSet>: Axes {}

#[diagnostic::do_not_recommend]
impl<A: Axes, S: AxisSet> HasAxes<S> for A where S::List: AllIn<A::List> {}

/// Axis `X` of `Self` can be renamed to `Y`.
#[diagnostic::on_unimplemented(
    message = "cannot rename `{X}` to `{Y}` in the tensor `Tensor<{Self}>`",
    label = "the old name must be an axis of the tensor and the new one must not",
    note = "each axis may appear once in a tensor type"
)]
pub trait CanRename<X: Axis, Y: Axis>: Axes {
    /// The renamed axes.
    type Out: Axes;
}

#[diagnostic::do_not_recommend]
impl<A: Axes, X: Axis, Y: Axis> CanRename<X, Y> for A
where
    Cons<X, Nil>: AllIn<A::List>,
    Cons<Y, Nil>: NoneIn<A::List>,
    A::List: Replace<X, Y>,
    <A::List as Replace<X, Y>>::Out: ToTuple,
{
    type Out = Renamed<A, X, Y>;
}

/// `Self` followed by the axes of `B`, none shared (e.g. embedding lookup adds a feature axis).
#[diagnostic::on_unimplemented(
    message = "cannot add the axes `{B}` to the tensor `Tensor<{Self}>`: an axis would appear twice",
    label = "the new axes must not be axes of the tensor already",
    note = "each axis may appear once in a tensor type"
)]
pub trait CanJoin<B: Axes>: Axes {
    /// The joined axes.
    type Out: Axes;
}

#[diagnostic::do_not_recommend]
impl<A: Axes, B: Axes> CanJoin<B> for A
where
    B::List: NoneIn<A::List>,
    A::List: Concat<B::List>,
    <A::List as Concat<B::List>>::Out: ToTuple,
{
    type Out = Joined<A, B>;
}
